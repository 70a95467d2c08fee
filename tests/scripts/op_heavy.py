"""Thousands of tiny ops per step: an LSTMCell stepped over 999 time steps in Python (or as many as
the first argument says)."""
import sys

import torch
from torch import nn

cell = nn.LSTMCell(8, 16)
head = nn.Linear(16, 1)
optimizer = torch.optim.SGD(list(cell.parameters()) + list(head.parameters()), lr=0.01)
x = torch.randn(int(sys.argv[1]) if len(sys.argv) > 1 else 999, 4, 8)
for step in range(1_000_000):
    h = torch.zeros(4, 16)
    c = torch.zeros(4, 16)
    for t in range(x.size(0)):
        h, c = cell(x[t], (h, c))
    loss = head(h).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
