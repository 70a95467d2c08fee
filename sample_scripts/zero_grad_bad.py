"""T02 bad: gradients are zero-filled every step instead of being set to None."""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(32, 64, device=device)
target = torch.randn(32, 1, device=device)

for step in range(1_000_000):
    optimizer.zero_grad(set_to_none=False)  # writes zeros into every gradient; expect: GRAD001
    loss = nn.functional.mse_loss(model(data), target)
    loss.backward()
    optimizer.step()
