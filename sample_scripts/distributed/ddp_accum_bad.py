"""T27 bad: gradient accumulation over 4 micro-batches under DDP without no_sync(): the gradients are
all-reduced after every micro-batch. CPU, gloo, under `perfaudit run --nproc-per-node 2`."""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

ACCUM_STEPS = 4
dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
model = DDP(nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10)),  # expect-run: DDP002
            gradient_as_bucket_view=True)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
micro_batches = [(torch.randn(16, 128), torch.randint(0, 10, (16,))) for _ in range(ACCUM_STEPS)]

for step in range(1_000_000):
    for x, y in micro_batches:
        loss = nn.functional.cross_entropy(model(x), y) / ACCUM_STEPS
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
