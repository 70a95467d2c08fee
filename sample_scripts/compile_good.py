"""T25/T26 good: a compiled model (the default inductor backend) with nothing that breaks its graph or makes
it recompile: the loss is logged as a tensor and read once per interval, outside the compiled code."""
import torch
from torch import nn

torch.manual_seed(0)


class MLP(nn.Module):
    def __init__(self, width: int = 128):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, width), nn.GELU(), nn.Linear(width, width), nn.GELU(),
                                 nn.Linear(width, 10))

    def forward(self, x):
        return self.net(x)


model = torch.compile(MLP())
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randn(128, 64)
target = torch.randint(0, 10, (128,))
running = torch.zeros(())

for step in range(1_000_000):
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(data), target)
    loss.backward()
    optimizer.step()
    running += loss.detach()
    if step % 100 == 99:  # ok: SYNC001
        print(f"step {step + 1}: loss {running.item() / 100:.4f}")
        running.zero_()
