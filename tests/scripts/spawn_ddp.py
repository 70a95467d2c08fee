"""DDP by torch.multiprocessing.spawn: the training runs in processes perfaudit does not watch."""
import torch
import torch.multiprocessing as mp


def train(rank, world_size):
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(1_000_000):
        opt.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        opt.step()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
