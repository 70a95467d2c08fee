"""A GPT in the nanoGPT style (pre-norm blocks, causal self-attention through scaled_dot_product_attention,
a tied-free language-model head), trained on random tokens: its FLOPs per step have a closed form
(tests/test_mfu.py)."""
import torch
from torch import nn
from torch.nn import functional as F

CONFIG = dict(vocab=128, block=32, layers=2, heads=4, dim=64, batch=8)


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, dim):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(block, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        logits = self.head(self.ln(self.blocks(x)))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    cfg = CONFIG
    torch.manual_seed(0)
    model = GPT(cfg["vocab"], cfg["block"], cfg["layers"], cfg["heads"], cfg["dim"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    for step in range(10_000):
        idx = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["block"]))
        targets = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["block"]))
        optimizer.zero_grad(set_to_none=True)
        model(idx, targets).backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step}")


if __name__ == "__main__":
    main()
