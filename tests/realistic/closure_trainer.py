"""A trainer in the shape frameworks use (Lightning's automatic optimisation): the training step is a
closure handed to `optimizer.step(closure)`, which runs forward and backward inside the optimizer's
step. One measured step is one closure step, and its forward and backward must still show as such."""
import torch
from torch import nn


class LitModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))

    def training_step(self, batch):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)


class Loop:
    def __init__(self, module, optimizer):
        self.module, self.optimizer = module, optimizer

    def run_step(self, batch):
        def closure():
            self.optimizer.zero_grad(set_to_none=True)
            loss = self.module.training_step(batch)
            loss.backward()
            return loss
        return self.optimizer.step(closure)

    def fit(self, batches, epochs):
        for epoch in range(epochs):
            for batch in batches:
                self.run_step(batch)


if __name__ == "__main__":
    torch.manual_seed(0)
    module = LitModel()
    data = [(torch.randn(128, 32), torch.randn(128, 1)) for _ in range(16)]
    Loop(module, torch.optim.Adam(module.parameters(), lr=1e-3, foreach=True)).fit(data, epochs=10_000)
