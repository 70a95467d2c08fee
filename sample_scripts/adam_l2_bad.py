"""T24 bad (advice): Adam with L2 weight decay and no learning-rate schedule."""
import torch
from torch import nn

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
data = torch.randn(64, 32)
target = torch.randn(64, 1)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-2)  # expect-run: OPT002

for step in range(1_000_000):
    optimizer.zero_grad()
    nn.functional.mse_loss(model(data), target).backward()
    optimizer.step()
