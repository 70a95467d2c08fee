"""Text classification with a small Transformer encoder, the way public examples write it: a Config dataclass
filled from argparse, a Trainer class with GradScaler + autocast switched by `--amp` (off by default),
gradient clipping whose norm is checked for NaN every step, `next(iter(loader))` with a restart, a OneCycle
schedule, a validation loader without workers, evaluation and logging at intervals."""
import argparse
import math
import random
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset


@dataclass
class Config:
    vocab: int = 2000
    dim: int = 128
    heads: int = 4
    layers: int = 2
    classes: int = 4
    max_len: int = 64
    batch_size: int = 32
    lr: float = 3e-4
    steps: int = 200
    eval_every: int = 50
    amp: bool = False
    clip: float = 1.0


class SyntheticText(Dataset):
    def __init__(self, n, cfg, seed=0):
        rnd = random.Random(seed)
        self.items = []
        for _ in range(n):
            label = rnd.randrange(cfg.classes)
            length = rnd.randint(16, cfg.max_len)
            toks = [rnd.randrange(4, cfg.vocab) for _ in range(length)]
            toks[rnd.randrange(length)] = label + 1
            self.items.append((toks, label))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        toks, label = self.items[i]
        return torch.tensor(toks), label


def collate(batch):
    seqs, labels = zip(*batch)
    padded = pad_sequence(seqs, batch_first=True, padding_value=0)
    mask = padded == 0
    return padded, mask, torch.tensor(labels)


class PositionalEncoding(nn.Module):
    def __init__(self, dim, max_len=512):
        super().__init__()
        pe = torch.zeros(max_len, dim)
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return x + self.pe[: x.size(1)]


class Classifier(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.dim, padding_idx=0)
        self.pos = PositionalEncoding(cfg.dim)
        layer = nn.TransformerEncoderLayer(cfg.dim, cfg.heads, 4 * cfg.dim, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, cfg.layers)
        self.head = nn.Linear(cfg.dim, cfg.classes)

    def forward(self, tokens, mask):
        h = self.encoder(self.pos(self.embed(tokens)), src_key_padding_mask=mask)
        h = h.masked_fill(mask.unsqueeze(-1), 0.0).sum(1) / (~mask).sum(1, keepdim=True)
        return self.head(h)


def evaluate(model, loader, device):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for tokens, mask, labels in loader:
            tokens, mask, labels = tokens.to(device), mask.to(device), labels.to(device)
            pred = model(tokens, mask).argmax(-1)
            correct += (pred == labels).sum().item()
            total += labels.numel()
    model.train()
    return correct / total


class Trainer:
    def __init__(self, cfg: Config, device):
        self.cfg, self.device = cfg, device
        self.model = Classifier(cfg).to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=0.01)
        self.sched = torch.optim.lr_scheduler.OneCycleLR(self.opt, max_lr=cfg.lr, total_steps=cfg.steps)
        self.scaler = torch.cuda.amp.GradScaler(enabled=cfg.amp)
        self.loss_fn = nn.CrossEntropyLoss()

    def step(self, batch):
        tokens, mask, labels = (t.to(self.device) for t in batch)
        with torch.autocast(device_type=self.device.type, enabled=self.cfg.amp):
            loss = self.loss_fn(self.model(tokens, mask), labels)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.opt)
        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip)
        self.scaler.step(self.opt)
        self.scaler.update()
        self.sched.step()
        return loss.detach(), grad_norm

    def fit(self, train_loader, val_loader):
        it = iter(train_loader)
        for step in range(1, self.cfg.steps + 1):
            try:
                batch = next(it)
            except StopIteration:
                it = iter(train_loader)
                batch = next(it)
            loss, grad_norm = self.step(batch)
            if math.isnan(grad_norm):  # expect-run: SYNC001
                print("nan gradient, skipping")
                continue
            if step % 20 == 0:
                print(f"step {step} loss {loss.item():.3f} lr {self.sched.get_last_lr()[0]:.2e}")  # ok: SYNC001
            if step % self.cfg.eval_every == 0:
                print(f"val acc {evaluate(self.model, val_loader, self.device):.3f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    cfg = Config(amp=args.amp, steps=args.steps)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train = DataLoader(SyntheticText(2048, cfg), batch_size=cfg.batch_size, shuffle=True, collate_fn=collate,
                       num_workers=2, pin_memory=True)
    val = DataLoader(SyntheticText(256, cfg, seed=1), batch_size=64, collate_fn=collate)  # expect-lint: DATA001
    Trainer(cfg, device).fit(train, val)


if __name__ == "__main__":
    main()
