"""A tidy, realistic training loop: workers, pinned non-blocking copies, no per-step syncs,
gradients set to None, no redundant bias, a fused optimizer."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(64)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


def main():
    torch.backends.cudnn.benchmark = True  # fixed image size
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset = TensorDataset(torch.randn(2048, 3, 32, 32), torch.randint(0, 10, (2048,)))
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=2, pin_memory=True,
                        persistent_workers=True)
    model = Net().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    running = torch.zeros((), device=device)
    for epoch in range(100):
        for step, (images, labels) in enumerate(loader):
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            running += loss.detach()
        print(f"epoch {epoch}: loss {running.item() / len(loader):.3f}")
        running.zero_()


if __name__ == "__main__":
    main()
