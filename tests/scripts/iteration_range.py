"""A trainer that wraps each whole iteration, batch fetch included, in its own profiler range."""
import torch
from torch import nn
from torch.profiler import record_function


def make_batches(n):
    return [(torch.randn(64, 128), torch.randint(0, 10, (64,))) for _ in range(n)]


def main():
    model = nn.Sequential(*[nn.Sequential(nn.Linear(128, 128), nn.ReLU()) for _ in range(30)], nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = iter(make_batches(40))
    for step in range(40):
        with record_function("iteration"):
            x, y = next(batches)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if loss.item() > 100:
                print("diverged")


if __name__ == "__main__":
    main()
