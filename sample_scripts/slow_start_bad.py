"""T29 bad: the labels are prepared one sample at a time with .item() before training starts."""
import torch
from torch import nn

features = torch.randn(20_000, 16)
raw_targets = torch.randn(20_000)
labels = []
for repeat in range(160):  # re-done for every configuration tried
    labels = []
    for i in range(len(raw_targets)):
        labels.append(1.0 if raw_targets[i].item() > 0 else 0.0)  # expect-run: START001
labels = torch.tensor(labels).unsqueeze(1)

model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1_000_000):
    optimizer.zero_grad()
    nn.functional.binary_cross_entropy_with_logits(model(features[:256]), labels[:256]).backward()
    optimizer.step()
