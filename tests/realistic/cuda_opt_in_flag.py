"""A classifier whose GPU branch is opt-in, as many public examples are (`--cuda`, off by default):
run as a user types it, the script takes its CPU branch even where a CUDA device is offered. The
report must be the CPU branch's report (the data wait, the per-parameter optimizer loop asked for
explicitly, the loss read every step, the zero-filled gradients, the batch's move that copies on a GPU) and
say how to run the GPU branch;
the autocast the GPU branch uses must not be reported missing."""
import argparse
import logging

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

log = logging.getLogger("train")


class Jitter:
    def __call__(self, x):
        return x + 0.01 * torch.randn_like(x)


class Signals(Dataset):
    def __init__(self, n=4096, dim=96, transform=None):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, dim, generator=g)
        self.y = (self.x[:, :8].sum(1) > 0).long()
        self.transform = transform

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        x = self.x[i]
        return (self.transform(x) if self.transform else x), self.y[i]


class Trainer:
    def __init__(self, args):
        self.use_cuda = args.cuda and torch.cuda.is_available()
        self.device = torch.device("cuda" if self.use_cuda else "cpu")
        kwargs = {"num_workers": 1, "pin_memory": True} if self.use_cuda else {}
        self.loader = DataLoader(Signals(transform=Jitter()), batch_size=32, shuffle=True, **kwargs)  # expect-run: DATA001
        self.model = nn.Sequential(nn.Linear(96, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                                   nn.Linear(256, 2)).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr, foreach=False)  # expect: OPT001
        self.log_interval = args.log_interval

    def train_epoch(self, epoch):
        self.model.train()
        total = 0.0
        for batch_idx, (data, target) in enumerate(self.loader):
            data, target = data.to(self.device), target.to(self.device)  # expect-run: COPY001
            self.optimizer.zero_grad(set_to_none=False)  # expect: GRAD001
            with torch.autocast("cuda", dtype=torch.float16, enabled=self.use_cuda):
                loss = nn.functional.cross_entropy(self.model(data), target)
            loss.backward()
            self.optimizer.step()
            total += loss.item()  # expect: SYNC001
            if batch_idx % self.log_interval == 0:
                log.info("epoch %d [%d] loss %.4f", epoch, batch_idx, total / (batch_idx + 1))


def main():
    parser = argparse.ArgumentParser(description="opt-in CUDA example")
    parser.add_argument("--cuda", action="store_true", default=False, help="enables CUDA training")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--log-interval", type=int, default=10)
    args = parser.parse_args()
    trainer = Trainer(args)
    for epoch in range(1, args.epochs + 1):
        trainer.train_epoch(epoch)


if __name__ == "__main__":
    main()
