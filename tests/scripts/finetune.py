"""A short pre-training with one optimizer, then fine-tuning with another: the window is the fine-tuning."""
import torch
from torch import nn

model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
x, y = torch.randn(64, 16), torch.randn(64, 1)
loss_fn = nn.MSELoss()

opt1 = torch.optim.Adam(model.parameters(), lr=1e-3)
for i in range(3):  # short pretrain
    opt1.zero_grad()
    loss_fn(model(x), y).backward()
    opt1.step()

opt2 = torch.optim.SGD(model[2].parameters(), lr=1e-2)
total = 0.0
for i in range(100_000):  # finetune
    opt2.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt2.step()
    total += loss.item()  # expect: SYNC001
