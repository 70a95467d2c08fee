"""Classification as public recipes write it: label smoothing through F.one_hot, class-balanced weights from the
batch's bincount, and the classes present counted with torch.unique for the log. On a GPU each of those ops reads
device values back to size its output: four waits a step that no `.item()` shows. (one_hot without num_classes
sizes its output from the batch: a batch missing the last class breaks the loss, so every batch here holds all
ten: 256 uniform labels miss one with a chance of 2e-11.)"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def smoothed_cross_entropy(logits, target, eps=0.1):
    one_hot = F.one_hot(target).float()  # expect-run: SYNC001
    soft = one_hot * (1 - eps) + eps / logits.size(-1)
    return -(soft * F.log_softmax(logits, dim=-1)).sum(-1).mean()


def class_balanced_weights(target, n_classes):
    counts = torch.bincount(target, minlength=n_classes).float()  # expect-run: SYNC001
    return counts.sum() / (counts.clamp(min=1) * n_classes)


class BalancedTrainer:
    def __init__(self, args):
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, args.classes)).to(self.device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=args.lr, momentum=0.9, foreach=True)
        self.args = args

    def batch(self):
        x = torch.randn(self.args.batch_size, 64, device=self.device)
        y = torch.randint(0, self.args.classes, (self.args.batch_size,), device=self.device)
        return x, y

    def train(self):
        seen = 0
        for step in range(self.args.steps):
            x, y = self.batch()
            logits = self.model(x)
            w = class_balanced_weights(y, self.args.classes)
            loss = smoothed_cross_entropy(logits, y) + 0.1 * F.cross_entropy(logits, y, weight=w)
            seen = max(seen, len(torch.unique(y)))  # expect-run: SYNC001
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            if step % 25 == 0:
                print(f"step {step} loss {loss.item():.3f} classes seen {seen}")  # ok: SYNC001


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--steps", type=int, default=100)
    BalancedTrainer(p.parse_args()).train()
