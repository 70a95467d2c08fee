"""A DDP training on CPU (gloo) where rank 1 does extra host work before every step (a slow data path):
the other rank waits for it in the gradient all-reduce every step. Run with
`perfaudit run --nproc-per-node 2 sample_scripts/distributed/ddp_straggler.py`."""
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)), gradient_as_bucket_view=True)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(64, 256)
target = torch.randint(0, 10, (64,))
slow = float(os.environ.get("SLOW_RANK_DELAY", "0.02"))

for step in range(1_000_000):
    if rank == 1:
        time.sleep(slow)  # this rank's input pipeline is slower
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(data), target)
    loss.backward()
    optimizer.step()
