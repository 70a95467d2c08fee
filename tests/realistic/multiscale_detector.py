"""Multi-scale training, as YOLO-style detectors do it: every few batches the trainer draws a new input size
(a multiple of 16) and resizes the batch to it, so the network learns every scale. cudnn.benchmark is on
"for speed" on the CUDA path. On a GPU each size the convolutions have not met yet makes cuDNN search its
algorithms again, tens of milliseconds a layer, for as long as new sizes keep coming; a CPU pays nothing
for it. A small backbone with a dense (per-cell) objectness head, AdamW, a warm-up schedule and a log
interval."""
import argparse
import logging
import math
import random

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

log = logging.getLogger("detector")


class SyntheticScenes(Dataset):
    """Images with a box each, as a detection dataset's samples after decoding."""

    def __init__(self, n=2048, size=96, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.images = torch.rand(n, 3, size, size, generator=g)
        self.centres = torch.rand(n, 2, generator=g)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i], self.centres[i]


def conv_bn(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.SiLU())


class TinyDetector(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.stem = conv_bn(3, width, 2)
        self.stages = nn.Sequential(*[conv_bn(width * 2 ** i, width * 2 ** (i + 1), 2) for i in range(3)])
        self.head = nn.Conv2d(width * 8, 1, 1)  # objectness per cell

    def forward(self, x):
        return self.head(self.stages(self.stem(x))).squeeze(1)


def objectness_targets(centres, cells):
    """A one-hot map per image: the cell that holds the box's centre."""
    idx = (centres * cells).long().clamp_(0, cells - 1)
    target = torch.zeros(len(centres), cells, cells, device=centres.device)
    target[torch.arange(len(centres), device=centres.device), idx[:, 1], idx[:, 0]] = 1.0
    return target


class MultiScaleTrainer:
    def __init__(self, model, loader, device, sizes, change_every=1, lr=2e-3, warmup=100):
        self.model, self.loader, self.device = model, loader, device
        self.sizes, self.change_every = sizes, change_every
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=5e-4)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s / 5000, 1))))
        self.size = sizes[-1]
        self.step = 0

    def rescale(self, images):
        if self.step % self.change_every == 0:
            self.size = random.choice(self.sizes)
        return F.interpolate(images, size=(self.size, self.size), mode="bilinear", align_corners=False)

    def train_step(self, images, centres):
        images = self.rescale(images)
        logits = self.model(images)
        loss = F.binary_cross_entropy_with_logits(logits, objectness_targets(centres, logits.shape[-1]))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        return loss

    def fit(self, epochs, log_every=25):
        for epoch in range(epochs):
            for images, centres in self.loader:
                images = images.to(self.device, non_blocking=True)
                centres = centres.to(self.device, non_blocking=True)
                loss = self.train_step(images, centres)
                if self.step % log_every == 0:
                    log.info("epoch %d step %d size %d loss %.4f", epoch, self.step, self.size, loss.item())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    random.seed(0)
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # expect-run: CUDNN002
    loader = DataLoader(SyntheticScenes(), batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        pin_memory=device.type == "cuda", drop_last=True, persistent_workers=args.workers > 0)
    sizes = list(range(48, 129, 16))  # 48 … 128, a new one drawn every batch
    trainer = MultiScaleTrainer(TinyDetector().to(device), loader, device, sizes)
    trainer.fit(args.epochs)


if __name__ == "__main__":
    main()
