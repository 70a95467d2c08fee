"""Suppressions: one silences a real finding (line 18), the other matches nothing (line 17, NOQA001)."""
import torch
from torch import nn

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(64, 32)
target = torch.randn(64, 1)
running = 0.0

for step in range(1_000_000):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(data), target)
    loss.backward()
    optimizer.step()
    detached = loss.detach()
    scaled = detached * 2  # perfaudit: ignore[SYNC001]; expect: NOQA001
    running += loss.item()  # perfaudit: ignore[SYNC001]; ok: SYNC001
