"""T07 bad: the script keeps its own profiler running around training (perfaudit neutralises it)."""
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(64, 32)
target = torch.randn(64, 1)

with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:  # expect-run: DEBUG001
    for step in range(1_000_000):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(data), target).backward()
        optimizer.step()
        prof.step()
print(prof.key_averages().table(row_limit=5))
