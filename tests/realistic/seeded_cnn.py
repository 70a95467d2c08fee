"""A CNN trainer with the reproducibility block public training scripts carry: with --seed it pins the
seeds and turns cudnn autotuning off for determinism. Run without --seed (the default here), that block
does not run, so `perfaudit fix` must leave its `cudnn.benchmark = False` alone: editing it would break
the seeded runs' determinism, and the run never executed it."""
import argparse
import random

import torch
from torch import nn


def build_model():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    if args.seed is not None:
        random.seed(args.seed)
        torch.manual_seed(args.seed)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False  # ok: CUDNN001
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=True)
    images, labels = torch.randn(32, 3, 24, 24), torch.randint(0, 10, (32,))
    for step in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
