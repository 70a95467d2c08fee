"""Noise and targets created on the host and moved every step (a diffusion-style loop)."""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(64, 256), nn.SiLU(), nn.Linear(256, 64)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
images = torch.randn(512, 64, device=device)


def diffusion_step(batch):
    noise = torch.randn(batch.shape)
    noise = noise.to(device)  # expect-run: COPY002
    t = torch.rand(batch.size(0), 1, device=device)
    noisy = (1 - t) * batch + t * noise
    return nn.functional.mse_loss(model(noisy), noise)


for epoch in range(10_000):
    for i in range(0, len(images), 64):
        loss = diffusion_step(images[i:i + 64])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
