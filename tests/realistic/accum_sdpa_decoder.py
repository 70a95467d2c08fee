"""A small decoder fine-tuned with gradient accumulation, as Hugging Face-style custom loops do: SDPA with a
padding mask, clip_grad_norm_ whose returned norm is logged every update, a linear warm-up schedule, batches
made on the host by a generator. The update's log is one print over two lines, two reads on the first and one
on the second: each line gets its own count (Python's line events go back and forth between such lines)."""
import math

import torch
import torch.nn.functional as F
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
V, D, H, L, T = 1000, 128, 4, 2, 64


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)

    def forward(self, x, pad):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        mask = causal[None, None] & pad[:, None, None, :]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(b, t, D))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = Attn()
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, pad):
        x = x + self.attn(self.ln1(x), pad)
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.zeros(1, T, D))
        self.blocks = nn.ModuleList([Block() for _ in range(L)])
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, ids, pad):
        x = self.tok(ids) + self.pos[:, :ids.size(1)]
        for blk in self.blocks:
            x = blk(x, pad)
        return self.head(x)


def batches(n=400, bs=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        ids = torch.randint(1, V, (bs, T), generator=g)
        lens = torch.randint(T // 2, T + 1, (bs,), generator=g)
        pad = torch.arange(T)[None] < lens[:, None]
        yield {"input_ids": ids, "attention_mask": pad}


def main():
    model = Decoder().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)
    accum, warmup, total = 4, 20, 100
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    model.train()
    for step, batch in enumerate(batches()):
        batch = {k: v.to(device) for k, v in batch.items()}  # expect-run: COPY002
        logits = model(batch["input_ids"], batch["attention_mask"])
        labels = batch["input_ids"].masked_fill(~batch["attention_mask"], -100)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), ignore_index=-100) / accum
        loss.backward()
        if (step + 1) % accum == 0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            print(f"update {(step + 1) // accum} loss {loss.item() * accum:.3f} norm {norm.item():.2f} "  # expect-run: SYNC001
                  f"lr {sched.get_last_lr()[0]:.2e} ppl {math.exp(loss.item() * accum):.0f}")  # expect-run: SYNC001
        if step + 1 == total:
            break


if __name__ == "__main__":
    main()
