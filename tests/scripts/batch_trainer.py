"""A small image classifier trained the way public examples are: argparse with a batch-size default, the device
chosen by what is there, a Trainer class, a DataLoader over an in-memory dataset, a log every few steps.
`--by-hand` makes its batches with torch.randn in the loop instead (no DataLoader to scale)."""
import argparse
import logging

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

log = logging.getLogger("train")


class SmallNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class Trainer:
    def __init__(self, model, loader, device, log_every=10):
        self.model, self.loader, self.device, self.log_every = model, loader, device, log_every
        self.opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss()

    def step(self, images, labels):
        images, labels = images.to(self.device), labels.to(self.device)
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(images), labels)
        loss.backward()
        self.opt.step()
        return loss

    def fit(self, steps):
        done = 0
        while done < steps:
            for images, labels in self.loader:
                loss = self.step(images, labels)
                if done % self.log_every == 0:
                    log.info("step %d loss %.3f", done, loss.item())
                done += 1
                if done >= steps:
                    return


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--by-hand", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = SmallNet().to(device)
    if args.by_hand:
        trainer = Trainer(model, None, device)
        for _ in range(args.steps):
            trainer.step(torch.randn(args.batch_size, 3, 32, 32), torch.randint(0, 10, (args.batch_size,)))
        return
    data = TensorDataset(torch.randn(512, 3, 32, 32), torch.randint(0, 10, (512,)))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)
    Trainer(model, loader, device).fit(args.steps)


if __name__ == "__main__":
    main()
