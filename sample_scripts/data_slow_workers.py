"""T06 bad: workers are used, but loading is so slow that the step still waits for data."""
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class VerySlowDataset(Dataset):
    """Stands for heavy decoding: 20 ms per sample, far more than two workers can hide."""

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.02)
        return torch.randn(64), torch.randn(1)


if __name__ == "__main__":
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1))
    loader = DataLoader(VerySlowDataset(), batch_size=8, num_workers=2, prefetch_factor=1)  # expect-run: DATA002
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(1_000_000):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
