"""T04 good: pinned batches, copied asynchronously with non_blocking=True."""
import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
dataset = TensorDataset(torch.randn(8192, 256), torch.randn(8192, 1))
# whole batches indexed at once from the in-memory tensors (not 512 one-sample fetches and a collate)
batches = BatchSampler(RandomSampler(dataset), batch_size=512, drop_last=False)
loader = DataLoader(dataset, sampler=batches, batch_size=None, num_workers=2, pin_memory=True,
                    persistent_workers=True)
model = nn.Sequential(nn.Linear(256, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

for epoch in range(1_000_000):
    for x, y in loader:
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)  # FP32 on the CUDA path; expect-run: AMP002
        loss.backward()
        optimizer.step()
