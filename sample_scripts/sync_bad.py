"""T01 bad: `.item()` on the loss every step forces a host-device sync."""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(64, 32, device=device)
target = torch.randn(64, 1, device=device)
running = 0.0

for epoch in range(1_000_000):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(data), target)
    loss.backward()
    optimizer.step()
    # every step: the host waits for the device to hand over the loss
    running += loss.item()  # expect: SYNC001
