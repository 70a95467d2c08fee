"""Code written for a GPU box, run here on a CPU: DataParallel when several GPUs are present, a
per-step synchronize() for timing and an empty_cache() on the CUDA path, which the emulated CUDA device
runs (one device: DataParallel stays a branch not taken)."""
import time

import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
if torch.cuda.device_count() > 1:
    model = nn.DataParallel(model)  # expect-lint: DIST001
model = model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(256, 128, device=device)
y = torch.randint(0, 10, (256,), device=device)
for step in range(100_000):
    start = time.perf_counter()
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize()  # expect: SYNC001
        torch.cuda.empty_cache()  # expect: MEM001
    elapsed = time.perf_counter() - start
    if step % 1000 == 0:
        print(f"step {step}: {elapsed * 1000:.1f} ms")
