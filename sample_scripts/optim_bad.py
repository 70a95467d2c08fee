"""T10 bad: Adam runs its single-tensor loop over many parameter tensors."""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
layers = []
for _ in range(12):
    layers += [nn.Linear(64, 64), nn.LayerNorm(64), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(64, 1)).to(device)
data = torch.randn(32, 64, device=device)
target = torch.randn(32, 1, device=device)

optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)  # expect: OPT001
for step in range(1_000_000):
    optimizer.zero_grad()
    nn.functional.mse_loss(model(data), target).backward()
    optimizer.step()
