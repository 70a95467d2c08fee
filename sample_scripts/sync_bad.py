"""T01 bad: `.item()` on the loss every step forces a host-device sync."""
import torch
from torch import nn

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(64, 32)
target = torch.randn(64, 1)

for epoch in range(1_000_000):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(data), target)
    loss.backward()
    optimizer.step()
    running = 0.0
    for _ in range(1):
        pass
    running += loss.item()
