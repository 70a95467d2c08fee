"""Float16 AMP whose GradScaler skips many steps: its scale grows after every good step (growth_interval=1),
overflows float16 again, and the scaler skips that optimizer step and halves it. Every skip is printed."""
import torch
from torch import nn

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cudnn.benchmark = True
model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 19, growth_interval=1)
for step in range(10_000):
    x, y = torch.randn(32, 3, 16, 16, device=device), torch.randint(0, 10, (32,), device=device)
    with torch.autocast(device, dtype=torch.float16):
        loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    scale = scaler.get_scale()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    if scaler.get_scale() < scale:
        print("skipped step", step, flush=True)
