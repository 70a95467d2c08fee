"""A trainer whose step is mostly Python: a deep stack of small blocks and a metrics helper that reads two
values back every step. Its Python stacks are most of a step's trace, so a small trace budget keeps them
for the first measured step only (tests/test_trust.py)."""
import sys

import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return x + torch.relu(self.norm(self.fc(x)))


class Trainer:
    def __init__(self, depth: int):
        self.model = nn.Sequential(*[Block(16) for _ in range(depth)]).to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def metrics(self, out, target) -> dict:
        return {"mse": nn.functional.mse_loss(out, target).item(), "mean": out.mean().item()}

    def train_step(self, x, target) -> dict:
        out = self.model(x)
        loss = nn.functional.mse_loss(out, target)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return self.metrics(out.detach(), target)


def main(depth: int = 40, steps: int = 60) -> None:
    trainer = Trainer(depth)
    x, target = torch.randn(8, 16, device=device), torch.randn(8, 16, device=device)
    for step in range(steps):
        seen = trainer.train_step(x, target)
        if step % 20 == 0:
            print(f"step {step}: mse {seen['mse']:.4f}", file=sys.stderr)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
