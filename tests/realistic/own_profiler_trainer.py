"""A script that profiles itself: torch.profiler left around the whole training loop."""
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(128, 64), torch.randn(128, 1)


def train(steps):
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:  # expect-run: DEBUG001
        for step in range(steps):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            prof.step()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))


if __name__ == "__main__":
    train(100_000)
