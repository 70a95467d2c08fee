"""Two training steps whose device memory perfaudit estimates on the emulated CUDA path, and which the
test measures again with torch's own MemTracker on the CPU (the same step, the optimizer in the
implementation torch picks for CUDA parameters: foreach): an MLP under AdamW, and a small CNN with
BatchNorm under SGD with momentum, and a small GPT whose attention has dropout (the CPU then takes
SDPA's math path, a GPU its fused kernel), the same through nn.TransformerEncoder, an LSTM language model, a smaller MLP under bfloat16 autocast and the
CNN with its batch in two accumulated micro-batches. `python memory_models.py KIND` trains one of them."""
import sys

import torch
from torch import nn


class Block(nn.Module):
    """A GPT block as nanoGPT writes it: attention through scaled_dot_product_attention with dropout."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in self.qkv(self.ln1(x)).split(C, dim=2))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                       dropout_p=self.dropout if self.training else 0.0)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp(self.ln2(x))


def build(kind: str, device, foreach=None, attention_dropout=0.1):
    torch.manual_seed(0)
    if kind == "gpt":
        vocab, dim = 512, 128
        model = nn.Sequential(nn.Embedding(vocab, dim), *[Block(dim, 4, attention_dropout) for _ in range(2)],
                              nn.LayerNorm(dim), nn.Linear(dim, vocab))
        optimizer = torch.optim.AdamW(model.to(device).parameters(), lr=1e-3, foreach=foreach)
        batch = (torch.randint(0, vocab, (4, 512)), torch.randint(0, vocab, (4, 512)))
    elif kind == "transformer":  # nn.TransformerEncoder: its attention inside nn.MultiheadAttention's one call
        vocab, dim = 512, 128
        layer = nn.TransformerEncoderLayer(dim, 4, 4 * dim, dropout=0.1, batch_first=True)
        layer.self_attn.dropout = attention_dropout
        model = nn.Sequential(nn.Embedding(vocab, dim), nn.TransformerEncoder(layer, 2), nn.Linear(dim, vocab))
        optimizer = torch.optim.AdamW(model.to(device).parameters(), lr=1e-3, foreach=foreach)
        batch = (torch.randint(0, vocab, (4, 512)), torch.randint(0, vocab, (4, 512)))
    elif kind == "mlp":
        model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
        optimizer = torch.optim.AdamW(model.to(device).parameters(), lr=1e-3, foreach=foreach)
        batch = (torch.randn(256, 512), torch.randint(0, 10, (256,)))
    elif kind == "rnn":
        model = LSTMModel(vocab=1000, dim=256)
        optimizer = torch.optim.Adam(model.to(device).parameters(), lr=1e-3, foreach=foreach)
        batch = (torch.randint(0, 1000, (16, 128)), torch.randint(0, 1000, (16, 128)))
    elif kind == "amp":  # small: a CPU without fast bfloat16 products (AVX2) runs the reference one's at ~0.3 GFLOP/s
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
        optimizer = torch.optim.AdamW(model.to(device).parameters(), lr=1e-3, foreach=foreach)
        batch = (torch.randn(128, 256), torch.randint(0, 10, (128,)))
    else:
        model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                              nn.Conv2d(64, 128, 3, padding=1, bias=False), nn.BatchNorm2d(128), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))
        optimizer = torch.optim.SGD(model.to(device).parameters(), lr=0.1, momentum=0.9, foreach=foreach)
        batch = (torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,)))
    return model, optimizer, batch


class LSTMModel(nn.Module):
    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.embed, self.lstm, self.head = nn.Embedding(vocab, dim), nn.LSTM(dim, dim, 2, batch_first=True), \
            nn.Linear(dim, vocab)

    def forward(self, x):
        return self.head(self.lstm(self.embed(x))[0])


def step(model, optimizer, batch, device, kind="mlp", between=lambda: None):
    """One optimizer step; `between` runs between micro-batches (MemTracker follows one call of a module)."""
    micro = 2 if kind == "accum" else 1  # gradient accumulation: the batch in micro-batches, one step
    for i, (x, y) in enumerate(zip(batch[0].chunk(micro), batch[1].chunk(micro))):
        if i:
            between()
        x, y = x.to(device), y.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=kind == "amp"):
            out = model(x)
        loss = nn.functional.cross_entropy(out.flatten(0, -2).float() if out.dim() > 2 else out.float(), y.flatten())
        if i == 0:
            optimizer.zero_grad()
        (loss / micro).backward()
    optimizer.step()


if __name__ == "__main__":
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, optimizer, batch = build(sys.argv[1], device)
    for _ in range(100_000):
        step(model, optimizer, batch, device, sys.argv[1])
