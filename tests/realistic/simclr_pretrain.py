"""SimCLR-style contrastive pre-training, the way many research repos write it: two augmented views per image
made in the main process, a small conv encoder with a projection head, NT-Xent over the 2N x 2N similarity
matrix (its mask and targets built on the host each step), AMP with autocast's default type (float16 on CUDA)
and the older torch.cuda.amp.GradScaler, cudnn.benchmark on the GPU, the loss read every step for a running
mean logged at an interval."""
import argparse
import logging

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

log = logging.getLogger("simclr")


def get_args():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--temperature", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    return p.parse_args()


class TwoViews(Dataset):
    def __init__(self, n=2048):
        g = torch.Generator().manual_seed(0)
        self.images = torch.rand(n, 3, 32, 32, generator=g)

    def __len__(self):
        return len(self.images)

    def augment(self, x):
        if torch.rand(1).item() < 0.5:
            x = x.flip(-1)
        x = x + 0.05 * torch.randn_like(x)
        return x.clamp(0, 1)

    def __getitem__(self, i):
        x = self.images[i]
        return self.augment(x), self.augment(x)


class Encoder(nn.Module):
    def __init__(self, dim=128):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),  # expect: BN001
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),  # expect: BN001
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, dim))

    def forward(self, x):
        return self.head(self.backbone(x))


def nt_xent(z1, z2, temperature):
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = z1.shape[0]
    sim = z @ z.t() / temperature
    mask = torch.eye(2 * n, dtype=torch.bool).to(z.device)  # expect-run: COPY002
    sim = sim.masked_fill(mask, torch.finfo(sim.dtype).min)
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)  # expect-run: COPY002
    return F.cross_entropy(sim, targets)


class Trainer:
    def __init__(self, args):
        self.args = args
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True
        self.model = Encoder().to(self.device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=args.lr, weight_decay=1e-6)
        self.loader = DataLoader(TwoViews(), batch_size=args.batch_size, shuffle=True, drop_last=True,  # expect-run: DATA001
                                 num_workers=args.workers)
        self.scaler = torch.cuda.amp.GradScaler(enabled=self.device.type == "cuda")
        self.step = 0

    def train_step(self, x1, x2):
        x1, x2 = x1.to(self.device), x2.to(self.device)
        with torch.autocast(device_type=self.device.type, enabled=self.device.type == "cuda"):
            loss = nt_xent(self.model(x1), self.model(x2), self.args.temperature)
        self.opt.zero_grad()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss

    def fit(self):
        running = 0.0
        for epoch in range(self.args.epochs):
            for x1, x2 in self.loader:
                loss = self.train_step(x1, x2)
                running += loss.item()  # expect: SYNC001
                self.step += 1
                if self.step % self.args.log_every == 0:
                    log.info("step %d loss %.4f", self.step, running / self.args.log_every)
                    running = 0.0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    Trainer(get_args()).fit()
