"""Mixed precision the way the AMP recipe writes it for GPUs without bfloat16 (V100, T4): float16 autocast with
a GradScaler, whose inf check in scaler.step() reads the device every step. That read is the price of float16
(its range overflows; the check skips those steps), not a sync to remove: nothing is reported at it. The loss
is logged every 50 steps from a device-side running sum."""
import argparse
import logging

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

log = logging.getLogger("fp16")


class Classifier(nn.Module):
    def __init__(self, features=256, hidden=1024, classes=10):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.LayerNorm(hidden),
                                  nn.Linear(hidden, hidden), nn.GELU())
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.head(self.body(x))


class Trainer:
    def __init__(self, model, loader, device, log_every):
        self.model, self.loader, self.device, self.log_every = model, loader, device, log_every
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device.type == "cuda")
        self.scaler = torch.amp.GradScaler(device.type, enabled=device.type == "cuda")
        self.running = torch.zeros((), device=device)

    def train_step(self, step, x, y):
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        with torch.autocast(self.device.type, dtype=torch.float16, enabled=self.device.type == "cuda"):
            loss = nn.functional.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)  # ok: SYNC001
        self.scaler.update()
        self.running += loss.detach()
        if step % self.log_every == 0:
            log.info("step %d loss %.4f", step, (self.running / (step + 1)).item())  # expect-lint: SYNC001

    def fit(self, epochs):
        step = 0
        for _ in range(epochs):
            for x, y in self.loader:
                self.train_step(step, x, y)
                step += 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
    loader = DataLoader(data, batch_size=256, shuffle=True, pin_memory=device.type == "cuda",
                        num_workers=2, persistent_workers=True)
    Trainer(Classifier().to(device), loader, device, args.log_every).fit(args.epochs)


if __name__ == "__main__":
    main()
