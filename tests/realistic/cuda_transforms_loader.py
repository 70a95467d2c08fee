"""An image classifier on its CUDA branch whose Dataset decodes and augments every sample in the main
process, torchvision-style (ToTensor from a uint8 array, a random resized crop, a flip, colour jitter
reading its factors with float(), Normalize checking its std), collated by the DataLoader's default.
All of that is host work on host tensors: the emulated device must let it run at native speed, so
that the data wait reported is the script's, not perfaudit's."""
import math
import random

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class ToTensor:
    def __call__(self, pic):
        img = torch.from_numpy(pic.transpose((2, 0, 1))).contiguous()
        return img.to(dtype=torch.float32).div(255)


class RandomResizedCrop:
    def __init__(self, size, scale=(0.3, 1.0)):
        self.size, self.scale = size, scale

    def __call__(self, img):
        _, h, w = img.shape
        side = min(h, w, int(math.sqrt(h * w * random.uniform(*self.scale))))
        top = torch.randint(0, h - side + 1, size=(1,)).item()  # ok: SYNC001
        left = torch.randint(0, w - side + 1, size=(1,)).item()  # ok: SYNC001
        crop = img[:, top:top + side, left:left + side]
        return nn.functional.interpolate(crop.unsqueeze(0), size=(self.size, self.size), mode="bilinear",
                                         align_corners=False).squeeze(0)


class RandomHorizontalFlip:
    def __call__(self, img):
        return img.flip(-1) if torch.rand(1) < 0.5 else img  # ok: SYNC001


class ColorJitter:
    def __init__(self, brightness=0.2, contrast=0.2):
        self.brightness, self.contrast = brightness, contrast

    def __call__(self, img):
        factor = float(torch.empty(1).uniform_(1 - self.brightness, 1 + self.brightness))  # ok: SYNC001
        img = (img * factor).clamp(0, 1)
        mean = img.mean(dim=(-3, -2, -1), keepdim=True)
        factor = float(torch.empty(1).uniform_(1 - self.contrast, 1 + self.contrast))  # ok: SYNC001
        return ((img - mean) * factor + mean).clamp(0, 1)


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def __call__(self, tensor):
        mean = torch.as_tensor(self.mean, dtype=tensor.dtype, device=tensor.device)
        std = torch.as_tensor(self.std, dtype=tensor.dtype, device=tensor.device)
        if (std == 0).any():  # ok: SYNC001
            raise ValueError(f"std evaluated to zero after conversion to {tensor.dtype}")
        return tensor.sub(mean.view(-1, 1, 1)).div(std.view(-1, 1, 1))


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class FolderLike(Dataset):
    """Stands in for an ImageFolder: uint8 HWC images decoded per sample."""

    def __init__(self, n, transform):
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 255, size=(n, 40, 40, 3), dtype=np.uint8)
        self.targets = rng.integers(0, 10, size=n).tolist()
        self.transform = transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.transform(self.images[index]), self.targets[index]


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    transform = Compose([ToTensor(), RandomResizedCrop(32), RandomHorizontalFlip(), ColorJitter(),
                         Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    loader = DataLoader(FolderLike(8192, transform), batch_size=64, shuffle=True)  # expect: DATA001
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(256, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)  # expect-run: CUDNN001
    for epoch in range(100):
        for images, targets in loader:
            images = images.to(device, non_blocking=True)  # expect-run: COPY001
            targets = targets.to(device, non_blocking=True)  # expect-run: COPY001
            loss = nn.functional.cross_entropy(model(images), targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
