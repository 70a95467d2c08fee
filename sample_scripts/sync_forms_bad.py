"""T01 bad: every common form of host-device sync, one per line, in a training step."""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(64, 32, device=device)
target = torch.randn(64, 1, device=device)
history = []

for step in range(1_000_000):
    optimizer.zero_grad()
    out = model(data)
    loss = nn.functional.mse_loss(out, target)
    loss.backward()
    optimizer.step()
    history.append(out.detach().cpu())               # copy to host; expect: SYNC001
    preds = out.squeeze(1).tolist()                  # copy to host; expect: SYNC001
    if loss > 1.0:                                   # bool() on a tensor; expect-run: SYNC001
        pass
    positive = out[out > 0]                          # mask indexing: size known only on the device; expect-run: SYNC001
    print(loss)                                      # formatting reads the value; expect-run: SYNC001
