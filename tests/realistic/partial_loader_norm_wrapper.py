"""A small image classifier built from a model library's norm layer (a BatchNorm2d subclass that applies its
activation too), trained by a Trainer whose loaders come from a `functools.partial` of DataLoader with the
loader options shared by train and validation. The Dataset crops, flips and jitters every sample in Python, in
the training process (num_workers=0 in the shared options)."""
import argparse
from functools import partial

import torch
from common.layers import BatchNormAct2d
from torch import nn
from torch.utils.data import DataLoader, Dataset


class JitteredImages(Dataset):
    def __init__(self, n: int, size: int = 40, crop: int = 32):
        g = torch.Generator().manual_seed(0)
        self.images = torch.rand(n, 3, size, size, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        self.crop = crop

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        image = self.images[i]
        top, left = torch.randint(0, image.shape[1] - self.crop + 1, (2,)).tolist()
        image = image[:, top:top + self.crop, left:left + self.crop]
        if torch.rand(()) < 0.5:
            image = image.flip(2)
        image = (image + 0.05 * torch.randn_like(image)).clamp(0, 1)
        mean = image.mean(dim=(1, 2), keepdim=True)
        return (image - mean) / (image.std(dim=(1, 2), keepdim=True) + 1e-6), self.labels[i]


def conv_bn(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1),  # expect: BN001
                         BatchNormAct2d(cout))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(conv_bn(3, 16), nn.MaxPool2d(2), conv_bn(16, 32), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class Trainer:
    def __init__(self, model, loader_factory, device, log_every=25):
        self.model, self.device, self.log_every = model.to(device), device, log_every
        self.train_loader = loader_factory(JitteredImages(2048), shuffle=True)  # expect-run: DATA001
        self.val_loader = loader_factory(JitteredImages(256), shuffle=False)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, fused=device.type == "cuda")  # expect-run: CUDNN001
        self.criterion = nn.CrossEntropyLoss()

    def train_epoch(self, epoch):
        self.model.train()
        for i, (images, labels) in enumerate(self.train_loader):
            images, labels = images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)
            loss = self.criterion(self.model(images), labels)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            if i % self.log_every == 0:
                print(f"epoch {epoch} step {i} loss {loss.item():.3f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader_factory = partial(DataLoader, batch_size=args.batch_size, num_workers=0,
                             pin_memory=device.type == "cuda", drop_last=True)
    trainer = Trainer(Net(), loader_factory, device)
    for epoch in range(args.epochs):
        trainer.train_epoch(epoch)


if __name__ == "__main__":
    main()
