"""A WGAN-style trainer: the critic steps five times for every generator step (n_critic = 5), each
critic step on a fresh batch, weights clipped after it. One measured step is one critic step; the
report says the generator steps once every five of them."""
import torch
from torch import nn

n_critic, nz, dim = 5, 16, 64
generator = nn.Sequential(nn.Linear(nz, 128), nn.ReLU(), nn.Linear(128, dim))
critic = nn.Sequential(nn.Linear(dim, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1))
opt_c = torch.optim.RMSprop(critic.parameters(), lr=5e-5, foreach=True)
opt_g = torch.optim.RMSprop(generator.parameters(), lr=5e-5, foreach=True)
real_data = torch.randn(8192, dim)


def batches(size=64):
    while True:
        for i in range(0, len(real_data) - size + 1, size):
            yield real_data[i:i + size]


stream = batches()
for iteration in range(1_000_000):
    for _ in range(n_critic):
        real = next(stream)
        fake = generator(torch.randn(real.size(0), nz)).detach()
        opt_c.zero_grad(set_to_none=True)
        loss_c = critic(fake).mean() - critic(real).mean()
        loss_c.backward()
        opt_c.step()
        for p in critic.parameters():
            p.data.clamp_(-0.01, 0.01)
    opt_g.zero_grad(set_to_none=True)
    loss_g = -critic(generator(torch.randn(64, nz))).mean()
    loss_g.backward()
    opt_g.step()
