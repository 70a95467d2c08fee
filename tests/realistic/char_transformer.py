"""A character-level transformer in nanoGPT's shape: get_batch() drawing random windows, an
estimate_loss() run every eval_interval, gradient clipping, AdamW, logging every log_interval. It is
written carefully: nothing in its step should be reported."""
import math

import torch
from torch import nn
from torch.nn import functional as F

batch_size, block_size, n_embd, n_head, n_layer = 16, 32, 64, 4, 2
eval_interval, eval_iters, log_interval, max_iters = 500, 20, 100, 100_000
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(1337)
text = "".join(chr(97 + (i * 7919) % 26) for i in range(20_000))
chars = sorted(set(text))
stoi = {ch: i for i, ch in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[n:]


def get_batch(split):
    source = train_data if split == "train" else val_data
    ix = torch.randint(len(source) - block_size, (batch_size,))
    x = torch.stack([source[i:i + block_size] for i in ix])
    y = torch.stack([source[i + 1:i + block_size + 1] for i in ix])
    if device == "cuda":
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x, y


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = nn.MultiheadAttention(n_embd, n_head, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))
        self.register_buffer("mask", torch.triu(torch.ones(block_size, block_size, dtype=torch.bool), 1))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=self.mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.tok = nn.Embedding(vocab, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.blocks = nn.Sequential(*[Block() for _ in range(n_layer)])
        self.head = nn.Linear(n_embd, vocab)

    def forward(self, idx, targets=None):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        logits = self.head(self.blocks(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


@torch.no_grad()
def estimate_loss(model):
    model.eval()
    out = {}
    for split in ("train", "val"):
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            losses[k] = model(*get_batch(split))[1].item()
        out[split] = losses.mean()
    model.train()
    return out


model = GPT(len(chars)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device == "cuda")
for it in range(max_iters):
    if it % eval_interval == 0:
        print(it, estimate_loss(model))
    lr = 3e-4 * 0.5 * (1 + math.cos(math.pi * it / max_iters))
    for group in optimizer.param_groups:
        group["lr"] = lr
    xb, yb = get_batch("train")
    logits, loss = model(xb, yb)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if it % log_interval == 0:
        print(f"iter {it}: loss {loss.item():.4f}")
