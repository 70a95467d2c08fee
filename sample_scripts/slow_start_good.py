"""T29 good: the same labels in one vectorised operation; training starts at once."""
import torch
from torch import nn

features = torch.randn(20_000, 16)
raw_targets = torch.randn(20_000)
labels = (raw_targets > 0).float().unsqueeze(1)

model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1_000_000):
    optimizer.zero_grad()
    nn.functional.binary_cross_entropy_with_logits(model(features[:256]), labels[:256]).backward()
    optimizer.step()
