"""An image classifier in the style of the torchvision training references: a CIFAR-like dataset whose
samples are decoded from uint8 and augmented one at a time in __getitem__ (random crop with padding, a
horizontal flip, per-channel normalisation), a small ResNet, SGD with momentum, autocast and
cudnn.benchmark on the CUDA path, pinned batches moved without blocking, a log interval.

Loading runs in the training process (num_workers=0). On a CPU the convolutions take nearly the whole
step and loading is a few percent of it; on a GPU the convolutions shrink to a few milliseconds and the
same loading is most of the step: the fix that ranks first on the GPU ranks last here."""
import argparse
import logging

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

log = logging.getLogger("train")

MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(3, 1, 1)
STD = torch.tensor([0.2470, 0.2435, 0.2616]).view(3, 1, 1)


class AugmentedImages(Dataset):
    """Images kept as uint8, as decoded files would give them; every fetch augments one."""

    def __init__(self, n=4096, size=32, classes=10, train=True):
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, classes, (n,), generator=g)
        self.size, self.train = size, train

    def __len__(self):
        return len(self.images)

    def random_crop(self, img, padding=4):
        padded = F.pad(img, (padding,) * 4, mode="reflect")
        top, left = torch.randint(0, 2 * padding + 1, (2,)).tolist()
        return padded[:, top:top + self.size, left:left + self.size]

    def __getitem__(self, i):
        img = self.images[i].float().div_(255)
        if self.train:
            img = self.random_crop(img)
            if torch.rand(()) < 0.5:
                img = img.flip(-1)
            img = img + 0.02 * torch.randn_like(img)  # light noise, as a colour-jitter stand-in
        return (img - MEAN) / STD, self.labels[i]


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, widths=(32, 64, 128), classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
        blocks, cin = [], widths[0]
        for i, w in enumerate(widths):
            blocks += [BasicBlock(cin, w, stride=1 if i == 0 else 2), BasicBlock(w, w)]
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def train_one_epoch(model, loader, optimizer, scaler, device, epoch, log_interval):
    model.train()
    running = torch.zeros((), device=device)
    for step, (images, targets) in enumerate(loader):
        images = images.to(device, non_blocking=True)
        targets = targets.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = F.cross_entropy(model(images), targets, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)  # expect-run: SYNC001
        scaler.update()
        running += loss.detach()
        if step % log_interval == 0:
            log.info("epoch %d step %d loss %.4f", epoch, step, (running / (step + 1)).item())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--log-interval", type=int, default=50)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    loader = DataLoader(AugmentedImages(), batch_size=args.batch_size, shuffle=True,  # expect: DATA001
                        pin_memory=device.type == "cuda", drop_last=True)
    model = ResNet().to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
    scaler = torch.amp.GradScaler(device.type, enabled=device.type == "cuda")
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer, scaler, device, epoch, args.log_interval)


if __name__ == "__main__":
    main()
