"""DDPM training as public diffusion repos write it: the noise schedule made with torch and kept as plain
attributes (not buffers), so `.to(device)` leaves it on the host and extract() reads the timesteps back with
`.cpu()` to index it: a device read in every forward, twice."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


def linear_beta_schedule(timesteps):
    scale = 1000 / timesteps
    return torch.linspace(scale * 0.0001, scale * 0.02, timesteps, dtype=torch.float64)


def extract(a, t, x_shape):
    batch_size = t.shape[0]
    out = a.gather(-1, t.cpu())  # expect-run: SYNC001
    return out.reshape(batch_size, *((1,) * (len(x_shape) - 1))).to(t.device)


class SinusoidalPosEmb(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        half = self.dim // 2
        emb = math.log(10000) / (half - 1)
        emb = torch.exp(torch.arange(half, device=x.device) * -emb)
        emb = x[:, None] * emb[None, :]
        return torch.cat((emb.sin(), emb.cos()), dim=-1)


class ResBlock(nn.Module):
    def __init__(self, dim, time_dim):
        super().__init__()
        self.mlp = nn.Linear(time_dim, dim)
        self.block1 = nn.Sequential(nn.Conv2d(dim, dim, 3, padding=1), nn.GroupNorm(8, dim), nn.SiLU())
        self.block2 = nn.Sequential(nn.Conv2d(dim, dim, 3, padding=1), nn.GroupNorm(8, dim), nn.SiLU())

    def forward(self, x, t):
        h = self.block1(x) + self.mlp(t)[:, :, None, None]
        return x + self.block2(h)


class TinyUnet(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.time_mlp = nn.Sequential(SinusoidalPosEmb(dim), nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))
        self.init_conv = nn.Conv2d(3, dim, 3, padding=1)
        self.down = ResBlock(dim, dim)
        self.pool = nn.Conv2d(dim, dim, 4, 2, 1)
        self.mid = ResBlock(dim, dim)
        self.up = nn.ConvTranspose2d(dim, dim, 4, 2, 1)
        self.out = nn.Conv2d(dim, 3, 1)

    def forward(self, x, time):
        t = self.time_mlp(time)
        h = self.down(self.init_conv(x), t)
        h = self.mid(self.pool(h), t)
        return self.out(self.up(h))


class GaussianDiffusion(nn.Module):
    def __init__(self, model, timesteps=1000):
        super().__init__()
        self.model = model
        self.num_timesteps = timesteps
        betas = linear_beta_schedule(timesteps)
        alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
        self.sqrt_alphas_cumprod = torch.sqrt(alphas_cumprod).float()
        self.sqrt_one_minus_alphas_cumprod = torch.sqrt(1.0 - alphas_cumprod).float()

    def q_sample(self, x_start, t, noise):
        return (extract(self.sqrt_alphas_cumprod, t, x_start.shape) * x_start +
                extract(self.sqrt_one_minus_alphas_cumprod, t, x_start.shape) * noise)

    def forward(self, img):
        b = img.shape[0]
        t = torch.randint(0, self.num_timesteps, (b,), device=img.device).long()
        noise = torch.randn_like(img)
        x = self.q_sample(img, t, noise)
        return F.mse_loss(self.model(x, t), noise)


class Images(Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.rand(3, 32, 32, generator=g) * 2 - 1


def cycle(dl):
    while True:
        yield from dl


class Trainer:
    def __init__(self, diffusion, args):
        self.device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu else "cpu")
        self.model = diffusion.to(self.device)
        self.dl = cycle(DataLoader(Images(), batch_size=args.batch_size, shuffle=True, num_workers=2,
                                   pin_memory=True, persistent_workers=True))
        self.opt = torch.optim.Adam(diffusion.parameters(), lr=args.lr, betas=(0.9, 0.99))
        self.steps = args.steps

    def train(self):
        for step in range(self.steps):
            data = next(self.dl).to(self.device)
            loss = self.model(data)
            loss.backward()
            self.opt.step()
            self.opt.zero_grad()
            if step % 10 == 0:
                print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=8e-5)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--cpu", action="store_true")
    args = p.parse_args()
    torch.backends.cudnn.benchmark = True
    Trainer(GaussianDiffusion(TinyUnet()), args).train()
