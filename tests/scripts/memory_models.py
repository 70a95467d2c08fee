"""Two training steps whose device memory perfaudit estimates on the emulated CUDA path, and which the
test measures again with torch's own MemTracker on the CPU (the same step, the optimizer in the
implementation torch picks for CUDA parameters: foreach): an MLP under AdamW, and a small CNN with
BatchNorm under SGD with momentum. `python memory_models.py mlp|cnn` trains one of them."""
import sys

import torch
from torch import nn


def build(kind: str, device, foreach=None):
    torch.manual_seed(0)
    if kind == "mlp":
        model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))
        optimizer = torch.optim.AdamW(model.to(device).parameters(), lr=1e-3, foreach=foreach)
        batch = (torch.randn(512, 1024), torch.randint(0, 10, (512,)))
    else:
        model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                              nn.Conv2d(64, 128, 3, padding=1, bias=False), nn.BatchNorm2d(128), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))
        optimizer = torch.optim.SGD(model.to(device).parameters(), lr=0.1, momentum=0.9, foreach=foreach)
        batch = (torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,)))
    return model, optimizer, batch


def step(model, optimizer, batch, device):
    x, y = batch[0].to(device), batch[1].to(device)
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


if __name__ == "__main__":
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, optimizer, batch = build(sys.argv[1], device)
    for _ in range(100_000):
        step(model, optimizer, batch, device)
