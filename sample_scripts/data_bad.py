"""T05 bad: batches are loaded in the training process (num_workers=0) while the step waits."""
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    """Stands for reading from storage: 1 ms of waiting per sample, little CPU."""

    def __init__(self):
        self.x, self.y = torch.randn(4096, 64), torch.randn(4096, 1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        time.sleep(0.001)
        return self.x[i], self.y[i]


loader = DataLoader(SlowDataset(), batch_size=16, shuffle=True)  # expect: DATA001
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

for epoch in range(1_000_000):
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
