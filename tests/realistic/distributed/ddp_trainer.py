"""A DDP trainer the way many repos write one: argparse, setup/cleanup helpers, a Trainer class, data
sharded by rank, gradient accumulation to reach a larger effective batch, logging on rank 0 only. The
accumulation forgets `no_sync()`: every micro-batch all-reduces the gradients."""
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def setup():
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    rank = dist.get_rank()
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        return rank, torch.device("cuda")
    return rank, torch.device("cpu")


def shard(n_samples: int, dim: int, rank: int, world: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_samples, dim, generator=g)
    y = (x[:, :4].sum(dim=1) > 0).long()
    return x[rank::world], y[rank::world]


class Trainer:
    def __init__(self, args, rank, device):
        self.args, self.rank, self.device = args, rank, device
        net = nn.Sequential(nn.Linear(args.dim, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 2))
        self.model = DDP(net.to(device), gradient_as_bucket_view=True)  # expect-run: DDP002
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr, foreach=True)
        self.x, self.y = shard(args.samples, args.dim, rank, dist.get_world_size())

    def micro_batches(self):
        order = torch.randperm(len(self.x))
        for idx in order.split(self.args.micro_batch):
            yield self.x[idx].to(self.device), self.y[idx].to(self.device)

    def fit(self):
        step = 0
        for epoch in range(self.args.epochs):
            for i, (x, y) in enumerate(self.micro_batches()):
                loss = nn.functional.cross_entropy(self.model(x), y) / self.args.accum
                loss.backward()
                if (i + 1) % self.args.accum == 0:
                    self.optimizer.step()
                    self.optimizer.zero_grad(set_to_none=True)
                    step += 1
                    if self.rank == 0 and step % self.args.log_every == 0:
                        print(f"epoch {epoch} step {step} loss {loss.item() * self.args.accum:.4f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--accum", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args()
    rank, device = setup()
    try:
        Trainer(args, rank, device).fit()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
