"""A denoising autoencoder trained by a Trainer class that "frees memory" after every step: a helper runs
gc.collect() and torch.cuda.empty_cache() on the CUDA path, the habit of scripts that once ran out of memory.
Everything else is as a careful script has it: pinned batches copied without blocking, cudnn.benchmark for
fixed shapes, bf16 autocast, no bias before BatchNorm, the loss read only at the logging interval."""
import gc
import logging

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

log = logging.getLogger("denoise")


def conv_bn(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Denoiser(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.encode = nn.Sequential(conv_bn(1, width), conv_bn(width, 2 * width))
        self.decode = nn.Sequential(conv_bn(2 * width, width), nn.Conv2d(width, 1, 3, padding=1))

    def forward(self, x):
        return self.decode(self.encode(x))


def free_memory(device):
    """Called after every step "to keep memory low"."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()  # expect-run: MEM001


class Trainer:
    def __init__(self, model, loader, device, log_every=50):
        self.model, self.loader, self.device, self.log_every = model.to(device), loader, device, log_every
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)

    def step(self, clean):
        clean = clean.to(self.device, non_blocking=True)
        noisy = clean + 0.1 * torch.randn_like(clean)
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            loss = nn.functional.mse_loss(self.model(noisy).float(), clean)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def fit(self, epochs):
        sample = next(iter(self.loader))[0]
        log.info("training on %s batches of %s", len(self.loader), tuple(sample.shape))
        for epoch in range(epochs):
            for i, (clean,) in enumerate(self.loader):
                loss = self.step(clean)
                free_memory(self.device)
                if i % self.log_every == 0:
                    log.info("epoch %d step %d loss %.4f", epoch, i, loss.item())


def main():
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    images = torch.rand(4096, 1, 32, 32)
    loader = DataLoader(TensorDataset(images), batch_size=32, shuffle=True, pin_memory=True,  # expect-lint: DATA001
                        drop_last=True)
    Trainer(Denoiser(), loader, device).fit(epochs=100)


if __name__ == "__main__":
    main()
