"""A TorchScript model (torch.jit.script) trained on the GPU, as older production code does: a scripted
residual MLP with a scripted loss, TF32 allowed, AMP with the deprecated API, per-interval memory logging.
TorchScript's interpreter calls ATen from C++, out of the emulated device's sight: the loss it returned was a
host tensor, the GradScaler's scale with it, and `unscale_` copied that scale to the device twice a step, a
copy no GPU makes."""
import time

import torch
from torch import nn

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self, d: int = 128, depth: int = 4, classes: int = 10):
        super().__init__()
        self.inp = nn.Linear(64, d)
        self.blocks = nn.ModuleList([Block(d) for _ in range(depth)])
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for blk in self.blocks:
            h = blk(h)
        return self.head(h)


@torch.jit.script
def smooth_ce(logits: torch.Tensor, target: torch.Tensor, eps: float = 0.1) -> torch.Tensor:
    logp = torch.log_softmax(logits, dim=-1)
    nll = -logp.gather(1, target.unsqueeze(1)).squeeze(1)
    return ((1 - eps) * nll - eps * logp.mean(dim=-1)).mean()


def main():
    model = torch.jit.script(Net()).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)  # expect-run: OPT001
    scaler = torch.cuda.amp.GradScaler(enabled=device.type == "cuda")
    x_all = torch.randn(4096, 64)
    y_all = torch.randint(0, 10, (4096,))
    t0 = time.time()
    for step in range(60):
        idx = torch.randint(0, 4096, (128,))
        x, y = x_all[idx].to(device), y_all[idx].to(device)  # expect-run: COPY001
        with torch.cuda.amp.autocast(enabled=device.type == "cuda"):
            loss = smooth_ce(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)  # ok: COPY001
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        if step % 20 == 0:
            mem = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else 0.0
            print(f"step {step} loss {loss.item():.3f} peak {mem:.1f} MiB {time.time() - t0:.1f}s")  # ok: SYNC001
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()


if __name__ == "__main__":
    main()
