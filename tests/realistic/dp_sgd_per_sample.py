"""Differentially private SGD by hand, in the torch.func tutorial's style: per-sample gradients with
`vmap(grad(loss))` over `functional_call`, each clipped to a norm bound, summed, noised and applied without an
optimizer or backward(). Tabular data kept as NumPy arrays, a batch sampled and converted every step; the
share of clipped samples logged every step (a read of a device value), the accuracy every eval_every steps."""
import argparse

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--clip", type=float, default=1.0)
parser.add_argument("--sigma", type=float, default=0.8)
parser.add_argument("--eval-every", type=int, default=50)
args = parser.parse_args()
device = "cuda" if torch.cuda.is_available() else "cpu"


def make_tabular(n=8192, features=24, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = (x[:, :4] @ np.array([1.0, -2.0, 0.5, 1.5]) > 0).astype(np.int64)
    return x, y, rng


class MLP(nn.Module):
    def __init__(self, features=24, hidden=128):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, 2))

    def forward(self, x):
        return self.net(x)


def sample_loss(params, buffers, model, x, y):
    logits = functional_call(model, (params, buffers), (x.unsqueeze(0),))
    return F.cross_entropy(logits, y.unsqueeze(0))


def privatize(per_sample, clip, sigma):
    """Clip each sample's gradient to `clip`, sum, add Gaussian noise scaled to the bound."""
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in per_sample.values()], dim=1).norm(dim=1)
    factors = (clip / (norms + 1e-6)).clamp(max=1.0)
    summed = {}
    for name, g in per_sample.items():
        total = torch.einsum("b,b...->...", factors, g)
        summed[name] = total + sigma * clip * torch.randn_like(total)
    return summed, norms


def main():
    x_all, y_all, rng = make_tabular()
    model = MLP().to(device)
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}
    per_sample_grads = vmap(grad(sample_loss), in_dims=(None, None, None, 0, 0))
    lr, clipped_share = 0.5, []
    for step in range(args.steps):
        idx = rng.choice(len(x_all), args.batch_size, replace=False)
        xb = torch.from_numpy(x_all[idx]).to(device)  # expect-run: COPY001
        yb = torch.from_numpy(y_all[idx]).to(device)  # expect-run: COPY001
        grads = per_sample_grads(params, buffers, model, xb, yb)
        noisy, norms = privatize(grads, args.clip, args.sigma)
        with torch.no_grad():
            for name, p in params.items():
                p.sub_(lr * noisy[name] / args.batch_size)
        clipped_share.append((norms > args.clip).float().mean().item())  # expect-run: SYNC001
        if step % args.eval_every == 0:
            with torch.no_grad():
                logits = functional_call(model, (params, buffers), (xb,))
                acc = (logits.argmax(1) == yb).float().mean().item()
            print(f"step {step}: batch accuracy {acc:.3f}, clipped {np.mean(clipped_share[-10:]):.2f}")


if __name__ == "__main__":
    main()
