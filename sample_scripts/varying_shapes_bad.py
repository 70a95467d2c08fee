"""T13 bad: each batch is padded to its own longest sequence, so shapes change every step."""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Embedding(1000, 32), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
lengths = [17, 33, 25, 41, 29, 37, 21, 45]

for step in range(1_000_000):
    length = lengths[step % len(lengths)]
    tokens = torch.randint(0, 1000, (16, length), device=device)
    optimizer.zero_grad()
    model(tokens).mean().backward()
    optimizer.step()
