"""T18 bad: torch.cuda.empty_cache() in every step."""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(64, 32, device=device)
target = torch.randn(64, 1, device=device)


def train_step():
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(data), target)
    loss.backward()
    optimizer.step()
    torch.cuda.empty_cache()  # "to save memory"; expect: MEM001


for step in range(1_000_000):
    train_step()
