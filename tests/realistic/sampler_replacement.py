"""Batches drawn with replacement through an iterator kept across epochs: the sampler's own
.tolist() inside the DataLoader is not the user's sync."""
import torch
from torch import nn
from torch.utils.data import DataLoader, RandomSampler, TensorDataset


def make_loader(batch_size):
    data = TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
    sampler = RandomSampler(data, replacement=True, num_samples=10**8)
    return DataLoader(data, batch_size=batch_size, sampler=sampler, num_workers=2, persistent_workers=True)


def main():
    model = nn.Sequential(nn.Linear(256, 3072), nn.ReLU(), nn.Linear(3072, 3072), nn.ReLU(), nn.Linear(3072, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    it = iter(make_loader(128))
    for step in range(1_000_000):
        x, y = next(it)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


if __name__ == "__main__":
    main()
