"""Research-style trainer at module level: a small ViT, an EMA copy updated parameter by parameter, per-parameter
gradient norms read every step in a dict comprehension (a frame of its own before Python 3.12), a non-finite
check on the clipped norm, warmup-cosine LR by hand, the loss kept in a history list."""
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

device = "cuda" if torch.cuda.is_available() else "cpu"


class ViT(nn.Module):
    def __init__(self, patch=4, dim=64, depth=2, heads=4, classes=10):
        super().__init__()
        self.patch = patch
        self.embed = nn.Linear(3 * patch * patch, dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, 1 + (32 // patch) ** 2, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 4, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        b, c, h, w = x.shape
        p = self.patch
        x = x.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).reshape(b, -1, c * p * p)
        x = torch.cat([self.cls.expand(b, -1, -1), self.embed(x)], 1) + self.pos
        return self.head(self.blocks(x)[:, 0])


def lr_at(step, base=1e-3, warmup=100, total=10000):
    if step < warmup:
        return base * step / warmup
    return base * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))


model = ViT().to(device)
ema = copy.deepcopy(model).eval()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
history = {"loss": [], "grad_norms": []}
for step in range(200):
    x = torch.randn(32, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (32,), device=device)
    for g in opt.param_groups:
        g["lr"] = lr_at(step)
    loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    norms = {n: p.grad.norm().item() for n, p in model.named_parameters() if p.grad is not None}  # expect: SYNC001
    total = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if not torch.isfinite(total):  # expect-run: SYNC001
        continue
    opt.step()
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.parameters()):
            e.mul_(0.999).add_(p.detach(), alpha=0.001)
    history["loss"].append(loss.item())  # expect: SYNC001
    history["grad_norms"].append(norms)
