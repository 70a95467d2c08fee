"""A trainer that evaluates before it trains, and prepares its data for a while after building the
optimizer: neither the evaluation batches nor the preparation may fill the window."""
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self):
        self.model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        data = TensorDataset(torch.randn(512, 16), torch.randn(512, 1))
        self.val_loader = DataLoader(data, batch_size=8)  # expect-lint: DATA001
        self.train_loader = DataLoader(data, batch_size=32, shuffle=True)  # expect: DATA001

    def prepare(self):
        deadline = time.time() + 1.0  # host-side preparation (below START001's 2 s): not a training step
        while time.time() < deadline:
            torch.randn(64).sum()

    @torch.no_grad()
    def evaluate(self):
        return sum(nn.functional.mse_loss(self.model(x), y) for x, y in self.val_loader)

    def fit(self, epochs):
        for epoch in range(epochs):
            for x, y in self.train_loader:
                self.optimizer.zero_grad()
                loss = nn.functional.mse_loss(self.model(x), y)
                loss.backward()
                self.optimizer.step()
                if loss.item() > 1e6:  # expect: SYNC001
                    break


if __name__ == "__main__":
    trainer = Trainer()
    trainer.prepare()
    print("val", float(trainer.evaluate()))
    trainer.fit(1000)
