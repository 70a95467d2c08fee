"""T09 bad: a wide MLP trained in FP32 on the CUDA path (no autocast): 0.8 GFLOP of forward matrix math a step."""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(),
                      nn.Linear(1024, 1024)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
x = torch.randn(128, 1024, device=device)
y = torch.randn(128, 1024, device=device)

for step in range(1_000_000):
    loss = nn.functional.mse_loss(model(x), y)  # expect-run: AMP002
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
