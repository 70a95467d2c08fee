"""Binary segmentation of synthetic blobs with a small U-Net, the way tutorials write it: argparse defaults
(`--workers 0`), a `conv_block()` helper that builds every stage (five calls, three of them with the same
widths as another), a BCE + Dice loss, the running loss read with .item() every step and logged at an
interval."""
import argparse
import logging
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
log = logging.getLogger("seg")


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--log-every", type=int, default=10)
    return p.parse_args()


class Blobs(Dataset):
    def __init__(self, n, size, seed=0):
        self.n, self.size = n, size
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        yy, xx = np.mgrid[: self.size, : self.size]
        cy, cx = self.rng.integers(8, self.size - 8, size=2)
        r = self.rng.integers(4, self.size // 4)
        mask = ((yy - cy) ** 2 + (xx - cx) ** 2 < r * r).astype(np.float32)
        img = mask + 0.3 * self.rng.standard_normal(mask.shape).astype(np.float32)
        img = (img - img.mean()) / (img.std() + 1e-6)
        return torch.from_numpy(img[None]), torch.from_numpy(mask[None])


def conv_block(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1),  # expect: BN001
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1),  # expect: BN001
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    def __init__(self, ch=(16, 32, 64)):
        super().__init__()
        self.down = nn.ModuleList()
        cin = 1
        for c in ch:
            self.down.append(conv_block(cin, c))
            cin = c
        self.up = nn.ModuleList()
        self.upconv = nn.ModuleList()
        for c in reversed(ch[:-1]):
            self.upconv.append(nn.ConvTranspose2d(cin, c, 2, stride=2))
            self.up.append(conv_block(2 * c, c))
            cin = c
        self.head = nn.Conv2d(cin, 1, 1)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.down):
            x = block(x)
            if i < len(self.down) - 1:
                skips.append(x)
                x = F.max_pool2d(x, 2)
        for upconv, block in zip(self.upconv, self.up):
            x = upconv(x)
            x = block(torch.cat([x, skips.pop()], dim=1))
        return self.head(x)


def dice_loss(logits, target, eps=1.0):
    p = torch.sigmoid(logits)
    inter = (p * target).sum(dim=(1, 2, 3))
    union = p.sum(dim=(1, 2, 3)) + target.sum(dim=(1, 2, 3))
    return 1 - ((2 * inter + eps) / (union + eps)).mean()


def train(args):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = UNet().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)  # expect-run: CUDNN001
    loader = DataLoader(Blobs(256, args.size), batch_size=args.batch_size, shuffle=True,  # expect-run: DATA001
                        num_workers=args.workers)
    step = 0
    for epoch in range(args.epochs):
        model.train()
        running, t0 = 0.0, time.time()
        for img, mask in loader:
            img, mask = img.to(device), mask.to(device)
            logits = model(img)
            loss = F.binary_cross_entropy_with_logits(logits, mask) + dice_loss(logits, mask)
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.item()  # expect: SYNC001
            step += 1
            if step % args.log_every == 0:
                log.info("epoch %d step %d loss %.4f (%.1f it/s)", epoch, step, running / args.log_every,
                         args.log_every / (time.time() - t0))
                running, t0 = 0.0, time.time()


if __name__ == "__main__":
    train(parse_args())
