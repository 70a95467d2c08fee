"""T08 by choice: a convolutional net trained reproducibly (the PyTorch reproducibility recipe: seeds,
cudnn.deterministic = True, cudnn.benchmark = False) on fixed shapes. Benchmarking would be faster but
may pick other algorithms from run to run: CUDNN001 says so as info, and `fix` leaves the flag alone."""
import random

import numpy as np
import torch
from torch import nn


def seed_everything(seed: int = 0) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False  # expect-run: CUDNN001


seed_everything()
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(
    nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
    nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
images = torch.randn(32, 3, 32, 32, device=device)
labels = torch.randint(0, 10, (32,), device=device)

for step in range(1_000_000):
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
