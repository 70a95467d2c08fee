"""A mixed-precision trainer as GPU code writes it: a Trainer class, the device picked by torch.cuda, a
transformer block (pre-norm, softmax attention written out, an MLP) and a convolutional stem, bfloat16 autocast
on the CUDA branch unless --no-amp, logging every few steps. On a GPU the region runs the matrix math in
bfloat16 (float16 with --dtype float16) and CUDA's float32 ops (layer_norm, softmax, pow, sum) in float32; the
MLP's output clamped below float16's overflow as T5 does it (in float16 only); the dtypes the step saw are logged
once, so a test can hold the emulated device to that."""
import argparse
import logging

import torch
from torch import nn
from torch.nn import functional as F

log = logging.getLogger("amp_trainer")


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.seen = {}

    def forward(self, x):
        b, t, c = x.shape
        h = self.ln1(x)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(h).split(c, dim=2))
        probs = (q @ k.transpose(-2, -1) / (c // self.heads) ** 0.5).softmax(dim=-1)
        x = x + self.proj((probs @ v).transpose(1, 2).reshape(b, t, c))
        out = x + self.mlp(self.ln2(x))
        self.seen = {"layer_norm": h.dtype, "softmax": probs.dtype, "linear": q.dtype, "clamped": False}
        if out.dtype == torch.float16:  # transformers' T5 layer: keep float16 activations finite
            limit = torch.where(torch.isinf(out).any(), torch.finfo(out.dtype).max - 1000, torch.finfo(out.dtype).max)
            out = torch.clamp(out, min=-limit, max=limit)
            self.seen["clamped"] = True
        return out


class Model(nn.Module):
    def __init__(self, dim=128, heads=4, layers=2, classes=10):
        super().__init__()
        self.stem = nn.Conv1d(8, dim, kernel_size=3, padding=1)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = F.relu(self.stem(x)).transpose(1, 2)
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=1))


class Trainer:
    def __init__(self, args):
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.amp = not args.no_amp and self.device.type == "cuda"
        self.dtype = getattr(torch, args.dtype)
        self.model = Model().to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.batch, self.steps = args.batch_size, args.steps

    def batches(self):
        for _ in range(self.steps):
            yield (torch.randn(self.batch, 8, 96, device=self.device),
                   torch.randint(0, 10, (self.batch,), device=self.device))

    def fit(self):
        for step, (x, y) in enumerate(self.batches()):
            with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.amp):
                logits = self.model(x)
                loss = F.cross_entropy(logits, y)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            if step == 1:
                seen = dict(self.model.blocks[0].seen, loss=loss.dtype, logits=logits.dtype)
                log.warning("dtypes %s", " ".join(f"{k}={str(v).replace('torch.', '')}" for k, v in sorted(seen.items())))
            if step % 10 == 0:
                log.info("step %d loss %.4f", step, loss.item())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--no-amp", action="store_true")
    parser.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    logging.basicConfig(level=logging.INFO)
    Trainer(parser.parse_args()).fit()
