"""A trainer that stages each batch in a pinned buffer it allocated once (`torch.empty(..., pin_memory=True)`
on a GPU machine) and copies it over without blocking: the pattern COPY001 asks for, built by hand."""
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
staging = torch.empty(512, 256, pin_memory=torch.cuda.is_available())
for step in range(10_000):
    staging.copy_(torch.randn(512, 256))
    x = staging.to(device, non_blocking=True)
    loss = model(x).square().mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
