"""A trainer configured by a dict of settings (as Hydra/YAML configs are), whose device is "cpu" in the
config it ships: the CUDA branch exists (`cfg["device"] == "cuda"`) but is not taken. A CPU report:
the host-made tensor moved in every step is only the CPU's (no device), the loader pins on its GPU
branch only, the loss read is a read a GPU run would wait on."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

CONFIG = {"device": "cpu", "batch_size": 64, "lr": 0.05, "epochs": 200,
          "loader": {"num_workers": 0, "pin_memory": False}}


def build(cfg):
    device = torch.device(cfg["device"] if cfg["device"] != "cuda" or torch.cuda.is_available() else "cpu")
    x = torch.randn(4096, 64)
    y = torch.randint(0, 4, (4096,))
    loader = DataLoader(TensorDataset(x, y), batch_size=cfg["batch_size"], shuffle=True, **cfg["loader"])  # expect-run: DATA001
    model = nn.Sequential(nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 4)).to(device)  # expect: BN001
    return device, loader, model


def train(cfg):
    device, loader, model = build(cfg)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
    history = []
    for epoch in range(cfg["epochs"]):
        for x, y in loader:
            x, y = x.to(device), y.to(device)  # expect-run: COPY001
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            history.append(loss.item())  # expect: SYNC001


if __name__ == "__main__":
    train(CONFIG)
