"""A GPT-style language model with a 50k-token vocabulary, trained at a batch too large for its logits: the
fp32 logits of one batch (batch x 2048 x 50304 floats, 52.7 GB at the default 128) and the log-softmax
cross_entropy keeps for backward do not fit even a 141 GB GPU. GPU only (perfaudit's OOM report is checked on
it: benchmarks/gpu_oom_fixture.py); the lines that hold the most are the loss's and the MLP's. With
--warmup-batches the batch doubles each step from 4 and the OOM comes in a later step."""
import argparse

import torch
from torch import nn
from torch.nn import functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--warmup-batches", action="store_true", help="double the batch each step up to --batch-size")
args = parser.parse_args()
vocab, block_size, n_embd, n_head, n_layer = 50304, 2048, 512, 8, 4
device = "cuda"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.qkv, self.proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, n_head, c // n_head).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, n_embd), nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
        self.ln_f, self.head = nn.LayerNorm(n_embd), nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, vocab), targets.reshape(-1))


model = GPT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
for step in range(args.steps):
    batch = min(args.batch_size, 4 << step) if args.warmup_batches else args.batch_size
    idx = torch.randint(vocab, (batch, block_size + 1), device=device)
    loss = model(idx[:, :-1], idx[:, 1:])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if step % 5 == 0:
        print(f"step {step}: loss {loss.item():.3f}")
