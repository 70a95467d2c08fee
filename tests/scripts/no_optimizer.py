"""Manual SGD: no torch.optim optimizer, steps are found from backward()."""
import sys

import torch

assert sys.argv[1:] == ["--lr", "0.1"], sys.argv
w = torch.randn(4, 1, requires_grad=True)
for step in range(1_000_000):
    loss = (torch.randn(8, 4) @ w).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
        w.grad = None
