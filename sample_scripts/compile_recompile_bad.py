"""T26 bad: a compiled VAE loss reads the global step counter for its KL warm-up, a Python int that changes
every step. dynamo specialises the compiled code on its value, so its guard fails on every call: one
recompile per step until dynamo reaches its recompile limit and runs the loss eagerly from then on."""
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
KL_WARMUP = 1000
global_step = 0


class VAE(nn.Module):
    def __init__(self, dim: int = 64, latent: int = 8):
        super().__init__()
        self.enc = nn.Linear(dim, 2 * latent)
        self.dec = nn.Sequential(nn.Linear(latent, 128), nn.ReLU(), nn.Linear(128, dim))

    def forward(self, x):
        mu, logvar = self.enc(x).chunk(2, dim=-1)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return self.dec(z), mu, logvar


@torch.compile(backend="aot_eager")
def vae_loss(recon, x, mu, logvar):
    kl = -0.5 * torch.mean(1 + logvar - mu.pow(2) - logvar.exp())
    beta = min(1.0, global_step / KL_WARMUP)  # expect-run: COMPILE002
    return F.mse_loss(recon, x) + beta * kl


model = VAE()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
data = torch.randn(128, 64)
for global_step in range(1_000_000):
    optimizer.zero_grad(set_to_none=True)
    recon, mu, logvar = model(data)
    loss = vae_loss(recon, data, mu, logvar)
    loss.backward()
    optimizer.step()
