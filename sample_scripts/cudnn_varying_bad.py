"""T08 bad: cudnn.benchmark on while every batch has a different image size."""
import torch
from torch import nn

torch.backends.cudnn.benchmark = True  # expect-run: CUDNN002
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
labels = torch.randint(0, 10, (8,), device=device)

for step in range(1_000_000):
    size = 24 + 4 * (step % 5)  # a new size every step
    images = torch.randn(8, 3, size, size, device=device)
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(images), labels).backward()
    optimizer.step()
