"""A classifier trained through Hugging Face Accelerate: prepare() wraps the model, the optimizer and the
DataLoader (rebuilding the loader), accelerator.backward() runs the backward."""
import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def build(accelerator: Accelerator):
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    data = TensorDataset(torch.randn(4096, 32), torch.randint(0, 10, (4096,)))
    loader = DataLoader(data, batch_size=64, shuffle=True)
    return accelerator.prepare(model, optimizer, loader)


def main():
    accelerator = Accelerator(cpu=True)
    model, optimizer, loader = build(accelerator)
    for epoch in range(2):
        for step, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            if step % 20 == 0:
                accelerator.print(f"epoch {epoch} step {step} loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
