"""T27 bad: DDP built with find_unused_parameters=True although the model uses every parameter in
every step (copied from a multi-task recipe whose heads were later merged). CPU, gloo, under
`perfaudit run --nproc-per-node 2`."""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
net = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
model = DDP(net, find_unused_parameters=True)  # expect-run: DDP001, DDP003
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(32, 128)
target = torch.randint(0, 10, (32,))

for step in range(1_000_000):
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(data), target)
    loss.backward()
    optimizer.step()
