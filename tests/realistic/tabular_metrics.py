"""A tabular classifier the way Kaggle notebooks train one: a pandas-free NumPy pipeline, a Trainer-less loop,
and accuracy computed in NumPy every step from predictions copied back (`.cpu().numpy()`): one read of the
device per copy, not two (the `.numpy()` after `.cpu()` reads a host tensor)."""
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def make_table(rows=4096, features=24, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    w = rng.normal(size=(features, 3))
    y = (x @ w).argmax(1)
    return torch.from_numpy(x), torch.from_numpy(y)


class TabularNet(nn.Module):
    def __init__(self, features, classes=3, width=128):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Dropout(0.1),  # expect: BN001
                                  nn.Linear(width, width), nn.ReLU(), nn.Linear(width, classes))

    def forward(self, x):
        return self.body(x)


def train(epochs=3):
    x, y = make_table()
    loader = DataLoader(TensorDataset(x, y), batch_size=256, shuffle=True, num_workers=2, pin_memory=True)
    model = TabularNet(x.shape[1]).to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, fused=DEVICE.type == "cuda")
    for epoch in range(epochs):
        accuracies = []
        for xb, yb in loader:
            xb, yb = xb.to(DEVICE, non_blocking=True), yb.to(DEVICE, non_blocking=True)
            logits = model(xb)
            loss = nn.functional.cross_entropy(logits, yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            preds = logits.argmax(1).cpu().numpy()  # expect: SYNC001
            accuracies.append(np.mean(preds == yb.cpu().numpy()))  # expect: SYNC001
        print(f"epoch {epoch}: accuracy {np.mean(accuracies):.3f}")


if __name__ == "__main__":
    train()
