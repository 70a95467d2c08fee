"""A trainer (an MLP, batches of 2048) that offloads its activations to host memory during the forward pass (`save_on_cpu`, pinned, as
the docs suggest for a model that does not fit), on the CUDA path; `--no-offload` keeps them on the device."""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--no-offload", action="store_true")
parser.add_argument("--steps", type=int, default=50)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(512, 512), nn.ReLU())], nn.Linear(512, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
offload = torch.autograd.graph.save_on_cpu(pin_memory=True)
for step in range(args.steps):
    x = torch.randn(2048, 512, device=device)
    y = torch.randint(0, 10, (2048,), device=device)
    if args.no_offload:
        loss = nn.functional.cross_entropy(model(x), y)
    else:
        with offload:
            loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
