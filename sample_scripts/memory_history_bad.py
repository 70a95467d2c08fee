"""T07 bad: the CUDA allocator's memory history, switched on to find where an out-of-memory came from, left on
for the training: every allocation and free takes a stack trace, kept in a history that only grows."""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if device.type == "cuda":
    torch.cuda.memory._record_memory_history(max_entries=100_000)  # expect: DEBUG001

model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 10)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device.type == "cuda")
data = torch.randn(128, 64, device=device)
labels = torch.randint(0, 10, (128,), device=device)

for step in range(1_000_000):
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(data), labels)
    loss.backward()
    optimizer.step()
