"""T15 bad: nn.DataParallel instead of DistributedDataParallel."""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
model = nn.DataParallel(model).to(device)  # expect: DIST001
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(64, 32, device=device)
target = torch.randn(64, 1, device=device)

for step in range(1_000_000):
    optimizer.zero_grad()
    nn.functional.mse_loss(model(data), target).backward()
    optimizer.step()
