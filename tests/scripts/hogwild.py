"""The Hogwild pattern of pytorch/examples (mnist_hogwild): a shared model trained by processes the script starts
itself with mp.Process and then joins. Each trains far longer than a test waits: perfaudit must stop them."""
import argparse

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F


class Env:
    def step(self, action):
        return torch.randn(4), 0.0


def collect(n):  # a process the script waits for before training: it steps an environment, it does not train
    env = Env()
    torch.save(torch.stack([env.step(0)[0] for _ in range(n)]), "/dev/null")


def run_epochs(model, rank, steps):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        F.mse_loss(model(torch.randn(16, 4)), torch.zeros(16, 1)).backward()
        optimizer.step()


def train(rank, model, steps):
    torch.manual_seed(rank)
    run_epochs(model, rank, steps)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--train-here", action="store_true")
    args = parser.parse_args()
    mp.set_start_method("spawn", force=True)
    prep = mp.Process(target=collect, args=(64,))
    prep.start()
    prep.join()
    model = torch.nn.Linear(4, 1)
    model.share_memory()
    if args.train_here:
        train(0, model, 300)
    else:
        processes = [mp.Process(target=train, args=(rank, model, 10_000_000)) for rank in range(args.num_processes)]
        for p in processes:
            p.start()
        for p in processes:
            p.join()
