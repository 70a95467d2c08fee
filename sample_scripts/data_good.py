"""T05/T06 good: enough persistent workers prefetch batches while the step runs."""
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    """Stands for reading from storage in blocks: 1 ms of waiting every 32 samples, little CPU. The four workers
    make a 1024-sample batch in about 9 ms of their own time each, well inside the step on any CPU (a step of
    this model takes 50-100 ms on two cores)."""

    def __init__(self):
        self.x, self.y = torch.randn(32768, 64), torch.randn(32768, 1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if i % 32 == 0:
            time.sleep(0.001)
        return self.x[i], self.y[i]


if __name__ == "__main__":
    loader = DataLoader(SlowDataset(), batch_size=1024, shuffle=True, num_workers=4,
                        persistent_workers=True, prefetch_factor=4)
    model = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(1_000_000):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
