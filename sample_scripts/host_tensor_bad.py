"""T17 bad: noise is created on the host and copied to the device every step."""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
generator = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32)).to(device)
optimizer = torch.optim.SGD(generator.parameters(), lr=0.01)
target = torch.randn(64, 32, device=device)

for step in range(1_000_000):
    optimizer.zero_grad()
    noise = torch.randn(64, 16)
    # host fill, then a host-to-device copy
    noise = noise.to(device)  # expect: COPY002
    nn.functional.mse_loss(generator(noise), target).backward()
    optimizer.step()
