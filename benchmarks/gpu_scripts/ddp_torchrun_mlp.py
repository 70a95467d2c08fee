"""A torchrun DDP classifier the way the tutorials write one: LOCAL_RANK, NCCL, a DistributedSampler, a pinned
loader with workers, fused AdamW, the loss logged every 50 steps on rank 0. A 5.3M-parameter MLP: its gradients'
all-reduce is one 21 MB bucket and a 4 MB one a step.

    perfaudit run benchmarks/gpu_scripts/ddp_torchrun_mlp.py --nproc-per-node 2   # a CPU: each rank on gloo

On 2 GPUs its trace checks the projection of a CPU run's collectives (projection/transfers/collectives.py):
the bus bandwidth and the compute stream's wait for the all-reduces at the end of backward."""
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(), nn.Linear(2048, 10)).to(device)
    model = DDP(model, device_ids=[local_rank])
    data = TensorDataset(torch.randn(4096, 512), torch.randint(0, 10, (4096,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=64, sampler=sampler, num_workers=2, pin_memory=True, drop_last=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    for epoch in range(10):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if i % 50 == 0 and dist.get_rank() == 0:
                print(epoch, i, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
