"""A classifier trainer whose problems exist only on its CUDA path: the device comes from a shared
helper (torch.accelerator), batches come from a DataLoader without pinned memory and are moved with a
blocking copy, the label-smoothing targets and a jitter tensor are built on the host in every step (one
of them by a helper the step calls, one with new_tensor), and the step is timed with CUDA events at a
logging interval. Mixed precision with a GradScaler, fused AdamW asked for through the helper's kwargs,
and cudnn flags are right. A CPU-only run sees all of it only by running the CUDA branch."""
import torch
from common.device import optimizer_kwargs, pick_device
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Features(Dataset):
    def __init__(self, n=2048, dim=128, classes=10):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def smoothed_targets(labels, classes, eps=0.1):
    """One-hot targets with label smoothing, built where the labels are."""
    out = torch.full((labels.size(0), classes), eps / classes)
    out[torch.arange(labels.size(0)), labels.cpu()] = 1 - eps + eps / classes  # expect-run: SYNC001
    return out


class Trainer:
    def __init__(self, model, loader, device, classes=10):
        self.device, self.classes = device, classes
        self.model = model.to(device)
        self.loader = loader
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, **optimizer_kwargs(device))  # ok: OPT001
        self.scaler = torch.amp.GradScaler(device.type, enabled=device.type == "cuda")
        self.timing = device.type == "cuda"

    def train_step(self, x, y):
        x = x.to(self.device)  # expect-run: COPY001
        y = y.to(self.device)  # expect-run: COPY001
        targets = smoothed_targets(y, self.classes).to(self.device)  # expect-run: COPY002
        jitter = x.new_tensor([0.01]).expand_as(x) * torch.randn(x.shape).to(self.device)  # expect: COPY002
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
            logits = self.model(x + jitter)
            loss = torch.sum(-targets * torch.log_softmax(logits.float(), dim=-1), dim=-1).mean()
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach()

    def fit(self, epochs):
        for epoch in range(epochs):
            for step, (x, y) in enumerate(self.loader):
                if self.timing and step % 100 == 0:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    loss = self.train_step(x, y)
                    end.record()
                    torch.cuda.synchronize()
                    print(f"epoch {epoch} step {step}: loss {loss.item():.3f} ({start.elapsed_time(end):.1f} ms)")
                else:
                    self.train_step(x, y)


def main():
    torch.backends.cudnn.benchmark = True
    device = pick_device()
    loader = DataLoader(Features(), batch_size=64, shuffle=True, drop_last=True)  # expect: DATA001
    model = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 10))
    Trainer(model, loader, device).fit(epochs=1000)


if __name__ == "__main__":
    main()
