"""A classifier trained the way public scripts write it: main(), argparse, CUDA when there is one,
batches drawn with next(iter(...)), copies in a comprehension, backward through a helper, a loss
accumulated with .item(), and branches that do not run every step."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--distributed", action="store_true")
    parser.add_argument("--log-every", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=100_000)
    return parser.parse_args()


def backward_step(loss, optimizer):
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def main():
    args = parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if torch.cuda.is_available():
        torch.backends.cudnn.benchmark = True
    model = nn.Sequential(nn.Linear(32, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048),
                          nn.ReLU(), nn.Linear(2048, 10))
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # foreach on its CUDA path: OPT001 info (fused exists)
    dataset = TensorDataset(torch.randn(8192, 32), torch.randint(0, 10, (8192,)))
    loader = DataLoader(dataset, batch_size=128, shuffle=True, num_workers=2, pin_memory=True,
                        persistent_workers=True)
    batches = iter(loader)
    running = 0.0
    for step in range(args.steps):
        try:
            batch = next(batches)
        except StopIteration:
            batches = iter(loader)
            batch = next(batches)
        images, labels = [t.to(device, non_blocking=True) for t in batch]
        loss = nn.functional.cross_entropy(model(images), labels)
        backward_step(loss, optimizer)
        running += loss.item()  # expect: SYNC001
        if args.distributed:
            torch.distributed.all_reduce(loss)
            print("reduced", loss.item())  # expect-lint: SYNC001
        if step % args.log_every == 0:
            print(f"step {step}: loss {running / (step + 1):.4f}")


if __name__ == "__main__":
    main()
