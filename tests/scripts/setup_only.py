"""Builds everything, then stops before the first step (a --dry-run flag left on, a config check)."""
import argparse
import sys

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--dry-run", action="store_true")
args = parser.parse_args()
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
print(f"{sum(p.numel() for p in model.parameters())} parameters")
if args.dry_run:
    sys.exit(0)
