"""A benchmark-style script: a synthetic dataset augmented per sample, batches drawn from an iterator
that a helper builds (only the iterator outlives the helper: the DataLoader object itself is
collected), no workers, a config dataclass."""
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


@dataclass
class Config:
    batch_size: int = 64
    max_steps: int = 100_000
    lr: float = 0.05


class NoisyCrops(Dataset):
    """Random crops with noise, per sample, as an augmentation pipeline does."""

    def __init__(self, n=1_000_000):
        self.n = n
        self.bank = torch.randn(256, 3, 40, 40)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        top, left = torch.randint(0, 9, (2,)).tolist()
        crop = self.bank[i % len(self.bank), :, top:top + 32, left:left + 32]
        if torch.rand(()) < 0.5:
            crop = crop.flip(-1)
        return crop + 0.05 * torch.randn_like(crop), i % 10


def make_batches(cfg):
    return iter(DataLoader(NoisyCrops(), batch_size=cfg.batch_size, shuffle=True, drop_last=True))  # expect: DATA001


def main(cfg: Config):
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                          nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    batches = make_batches(cfg)
    for step in range(cfg.max_steps):
        images, labels = next(batches)
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main(Config())
