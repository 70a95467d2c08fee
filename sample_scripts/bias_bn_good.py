"""T03 good: convolutions before BatchNorm have no bias."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.head(x.mean((2, 3)))


torch.backends.cudnn.benchmark = True  # fixed input shapes
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = Net().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
images = torch.randn(8, 3, 16, 16, device=device)
labels = torch.randint(0, 10, (8,), device=device)

for step in range(1_000_000):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
