"""A tiny mixture-of-experts language model with top-1 routing, written as research repos write it: experts
picked by boolean masks (`if mask.any()`, `out[mask] = ...`: each a sync on a GPU, the masked size known only
there), a load-balancing loss whose comprehension casts masks with `.float()` (a cast, no read), a causal mask
made on the host in every forward and moved, nanoGPT-style batches and lr schedule."""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
VOCAB, DIM, EXPERTS, SEQ, BATCH = 512, 128, 4, 64, 16


class Expert(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class MoE(nn.Module):
    def __init__(self, dim, n_experts):
        super().__init__()
        self.gate = nn.Linear(dim, n_experts, bias=False)
        self.experts = nn.ModuleList([Expert(dim) for _ in range(n_experts)])

    def forward(self, x):  # ok: SYNC001
        flat = x.reshape(-1, x.shape[-1])
        probs = F.softmax(self.gate(flat), dim=-1)
        weight, idx = probs.max(dim=-1)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            mask = idx == e
            if mask.any():  # expect-run: SYNC001
                out[mask] = weight[mask, None] * expert(flat[mask])  # expect-run: SYNC001
        # load-balancing auxiliary loss
        frac = torch.stack([(idx == e).float().mean() for e in range(len(self.experts))])  # ok: SYNC001
        aux = len(self.experts) * (frac * probs.mean(0)).sum()
        return out.reshape_as(x), aux


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.attn = nn.MultiheadAttention(DIM, 4, batch_first=True)
        self.ln2 = nn.LayerNorm(DIM)
        self.moe = MoE(DIM, EXPERTS)

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        m, aux = self.moe(self.ln2(x))
        return x + m, aux


class TinyMoELM(nn.Module):
    def __init__(self, layers=2):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.zeros(1, SEQ, DIM))
        self.blocks = nn.ModuleList([Block() for _ in range(layers)])
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, idx):
        mask = torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), diagonal=1).to(idx.device)  # expect-run: COPY002
        x = self.tok(idx) + self.pos
        aux_total = 0.0
        for block in self.blocks:
            x, aux = block(x, mask)
            aux_total = aux_total + aux
        return self.head(x), aux_total


def get_batch(data):
    ix = torch.randint(len(data) - SEQ - 1, (BATCH,))
    x = torch.stack([data[i:i + SEQ] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + SEQ] for i in ix])
    return x.to(device), y.to(device)


if __name__ == "__main__":
    data = torch.randint(VOCAB, (100_000,))
    model = TinyMoELM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    max_iters = int(os.environ.get("MAX_ITERS", 5000))
    for it in range(max_iters):
        lr = 3e-4 * min(1.0, (it + 1) / 100) * 0.5 * (1 + math.cos(math.pi * it / max_iters))
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(data)
        logits, aux = model(x)
        loss = F.cross_entropy(logits.view(-1, VOCAB), y.view(-1)) + 0.01 * aux
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if it % 100 == 0:
            print(f"iter {it}: loss {loss.item():.4f}")
