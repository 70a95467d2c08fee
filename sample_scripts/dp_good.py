"""T15 good: one process per device; wrap in DistributedDataParallel when launched by torchrun."""
import os

import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
if "LOCAL_RANK" in os.environ:  # torchrun --nproc_per_node=N dp_good.py
    torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    model = nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(64, 32, device=device)
target = torch.randn(64, 1, device=device)

for step in range(1_000_000):
    optimizer.zero_grad()
    nn.functional.mse_loss(model(data), target).backward()
    optimizer.step()
