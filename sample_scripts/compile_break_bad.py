"""T25 bad: a compiled model whose forward reads a tensor value into Python: dynamo breaks the graph there
on every call, runs the rest of forward as a second graph, and Python sits between the two."""
import torch
from torch import nn

torch.manual_seed(0)


class GatedMLP(nn.Module):
    def __init__(self, width: int = 256):
        super().__init__()
        self.inp = nn.Linear(64, width)
        self.hidden = nn.Linear(width, width)
        self.out = nn.Linear(width, 10)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        if h.mean().item() > 0.5:  # expect: COMPILE001  expect-run: SYNC001
            h = h * 0.5
        h = torch.relu(self.hidden(h))
        return self.out(h)


model = torch.compile(GatedMLP(), backend="aot_eager")
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(256, 64)
target = torch.randint(0, 10, (256,))

for step in range(1_000_000):
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(data), target)
    loss.backward()
    optimizer.step()
