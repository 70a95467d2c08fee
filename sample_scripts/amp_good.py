"""T09 good: the forward pass runs under autocast on the CUDA path (bf16), with fused AdamW."""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
x = torch.randn(64, 256, device=device)
y = torch.randint(0, 10, (64,), device=device)

for step in range(1_000_000):
    with torch.autocast(device.type, dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
