"""A Trainer class driven by a config dict: anomaly detection left on from a debugging session, and
gradients zero-filled to keep an old behaviour."""
import torch
from torch import nn

CONFIG = {"lr": 0.05, "epochs": 1000, "detect_anomaly": True, "batch_size": 32}


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        torch.autograd.set_detect_anomaly(cfg["detect_anomaly"])  # expect-run: DEBUG001
        self.model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg["lr"])
        self.x = torch.randn(1024, 20)
        self.y = torch.randn(1024, 1)

    def training_step(self, xb, yb):
        self.optimizer.zero_grad(set_to_none=False)  # expect: GRAD001
        loss = nn.functional.mse_loss(self.model(xb), yb)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def fit(self):
        bs = self.cfg["batch_size"]
        for epoch in range(self.cfg["epochs"]):
            losses = [self.training_step(self.x[i:i + bs], self.y[i:i + bs]) for i in range(0, len(self.x), bs)]
            print(epoch, torch.stack(losses).mean().item())


if __name__ == "__main__":
    Trainer(CONFIG).fit()
