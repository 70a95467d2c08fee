"""An image-classification trainer whose Dataset does its own per-sample transforms on the host, as
torchvision-style pipelines do: a Normalize module that checks its statistics, a random crop whose
offsets come from torch.randint(...).item(), all inside __getitem__ with num_workers=0. Those reads
are of host tensors in the data pipeline: no host-device sync. A std() regulariser in the step reads
its scalar inside the CPU kernel only."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Normalize(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(-1, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(-1, 1, 1))

    def forward(self, img):
        if (self.std == 0).any():
            raise ValueError("std evaluated to zero, leading to division by zero")
        return (img - self.mean) / self.std


class RandomCrop:
    def __init__(self, size):
        self.size = size

    def __call__(self, img):
        _, h, w = img.shape
        top = torch.randint(0, h - self.size + 1, (1,)).item()
        left = torch.randint(0, w - self.size + 1, (1,)).item()
        return img[:, top:top + self.size, left:left + self.size]


class Images(Dataset):
    def __init__(self, n, transform):
        self.images = torch.rand(n, 3, 20, 20)
        self.labels = torch.randint(0, 10, (n,))
        self.transform = transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.transform(self.images[i]), self.labels[i]


class Compose:
    def __init__(self, steps):
        self.steps = steps

    def __call__(self, x):
        for step in self.steps:
            x = step(x)
        return x


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=50)
    args = parser.parse_args()
    transform = Compose([RandomCrop(16), Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25])])
    loader = DataLoader(Images(2048, transform), batch_size=64, shuffle=True)  # expect: DATA001
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(args.epochs):
        for images, labels in loader:
            optimizer.zero_grad(set_to_none=True)
            logits = model(images)
            loss = nn.functional.cross_entropy(logits, labels) + 1e-3 * logits.std()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
