"""Multi-task training: two datasets zipped (the short one cycled), a tqdm bar with the loss in its postfix,
deprecated torch.cuda.amp APIs, a NaN guard on the gradient norm (an `if` on a device tensor: a read the trace
shows without a Python call, placed at its own line by the emulated run, not at the postfix's `.item()`)."""
import itertools

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm

use_cuda = torch.cuda.is_available()
device = torch.device("cuda:0" if use_cuda else "cpu")


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
        self.cls = nn.Linear(256, 5)
        self.reg = nn.Linear(256, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.cls(h), self.reg(h).squeeze(-1)


def loaders():
    a = TensorDataset(torch.randn(2048, 32), torch.randint(0, 5, (2048,)))
    b = TensorDataset(torch.randn(512, 32), torch.randn(512))
    kw = {"num_workers": 1, "pin_memory": True} if use_cuda else {}  # a worker on the CUDA path
    return DataLoader(a, batch_size=64, shuffle=True, **kw), DataLoader(b, batch_size=64, shuffle=True, **kw)  # ok: DATA001


def train():
    model = Shared().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.cuda.amp.GradScaler(enabled=use_cuda)
    cls_loader, reg_loader = loaders()
    for epoch in range(2):
        pbar = tqdm(zip(cls_loader, itertools.cycle(reg_loader)), total=len(cls_loader), desc=f"epoch {epoch}")
        for (xa, ya), (xb, yb) in pbar:
            xa, ya = xa.to(device, non_blocking=True), ya.to(device, non_blocking=True)
            xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
            with torch.cuda.amp.autocast(enabled=use_cuda):
                logits, _ = model(xa)
                _, pred = model(xb)
                loss = F.cross_entropy(logits, ya) + F.mse_loss(pred.float(), yb)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if torch.isnan(norm):  # expect-run: SYNC001
                print("skipping step with NaN gradients")
                continue
            scaler.step(opt)
            scaler.update()
            pbar.set_postfix(loss=loss.item(), norm=float(norm))  # expect: SYNC001


if __name__ == "__main__":
    train()
