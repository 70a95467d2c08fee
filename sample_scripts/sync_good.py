"""T01 good: the loss is accumulated on the device and read once per logging interval."""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(64, 32, device=device)
target = torch.randn(64, 1, device=device)
running = torch.zeros((), device=device)

for step in range(1_000_000):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(data), target)
    loss.backward()
    optimizer.step()
    running += loss.detach()
    if step % 100 == 0:  # one sync per 100 steps
        print(f"step {step}: mean loss {running.item() / (step + 1):.4f}")  # ok: SYNC001
