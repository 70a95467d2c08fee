"""A 1-D convolutional speech denoiser (Demucs/Wave-U-Net style): noisy clips synthesised per sample in worker
processes, strided Conv1d encoders and ConvTranspose1d decoders with skip connections and GroupNorm, float16
autocast through the older torch.cuda.amp API with its GradScaler, a linear warm-up schedule, the loss read only
at the logging interval. Written clean: nothing here should be a warning."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SAMPLE_RATE = 8000
CLIP = 4096


class NoisyClips(Dataset):
    def __init__(self, n=2048, seed=0):
        self.n, self.seed = n, seed

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rng = np.random.default_rng(self.seed + i)
        t = np.arange(CLIP) / SAMPLE_RATE
        clean = sum(rng.uniform(0.1, 0.5) * np.sin(2 * math.pi * rng.uniform(80, 900) * t) for _ in range(3))
        noisy = clean + rng.normal(0, 0.2, CLIP)
        return torch.from_numpy(noisy[None].astype(np.float32)), torch.from_numpy(clean[None].astype(np.float32))


class Down(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, 8, stride=4, padding=2)
        self.norm = nn.GroupNorm(4, cout)

    def forward(self, x):
        return F.gelu(self.norm(self.conv(x)))


class Up(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.ConvTranspose1d(cin, cout, 8, stride=4, padding=2)
        self.norm = nn.GroupNorm(4, cout)

    def forward(self, x, skip):
        return F.gelu(self.norm(self.conv(x))) + skip


class Denoiser(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.inp = nn.Conv1d(1, width, 7, padding=3)
        self.downs = nn.ModuleList([Down(width, width * 2), Down(width * 2, width * 4)])
        self.ups = nn.ModuleList([Up(width * 4, width * 2), Up(width * 2, width)])
        self.out = nn.Conv1d(width, 1, 7, padding=3)

    def forward(self, x):
        h = self.inp(x)
        skips = [h]
        for down in self.downs:
            h = down(h)
            skips.append(h)
        skips.pop()
        for up in self.ups:
            h = up(h, skips.pop())
        return x - self.out(h)


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True  # every clip is CLIP samples long
    loader = DataLoader(NoisyClips(), batch_size=16, shuffle=True, num_workers=2, pin_memory=True,
                        persistent_workers=True, drop_last=True)
    model = Denoiser().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device.type == "cuda")
    warmup = 200
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    scaler = torch.cuda.amp.GradScaler(enabled=device.type == "cuda")
    step = 0
    for epoch in range(100):
        running = torch.zeros((), device=device)
        for noisy, clean in loader:
            noisy, clean = noisy.to(device, non_blocking=True), clean.to(device, non_blocking=True)
            with torch.cuda.amp.autocast(enabled=device.type == "cuda"):
                loss = F.l1_loss(model(noisy), clean)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            running += loss.detach()
            step += 1
            if step % 100 == 0:
                print(f"epoch {epoch} step {step} l1 {running.item() / 100:.4f}")
                running.zero_()


if __name__ == "__main__":
    main()
