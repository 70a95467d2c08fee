"""An older-style training loop on the CUDA path: the device from torch.accelerator, samples moved to the
device one by one inside Dataset.__getitem__, class weights rebuilt with the legacy torch.cuda.FloatTensor
type in every step, and the noise for a denoising objective made by a generator function the step calls
and then moved. Each costs a host-to-device copy per step on a GPU and nothing on a CPU."""
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
use_cuda = device.type == "cuda"
CLASS_WEIGHTS = [1.0, 2.0, 1.0, 0.5, 1.0, 1.0, 3.0, 1.0]


class Signals(Dataset):
    def __init__(self, n=1024):
        self.data = [torch.sin(torch.linspace(0, 3.14 * (i % 7 + 1), 256)) for i in range(n)]
        self.labels = [i % len(CLASS_WEIGHTS) for i in range(n)]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i].to(device), self.labels[i]  # expect-run: COPY001


def sample_noise(batch, length):
    return 0.05 * torch.randn(batch, length)


model = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, len(CLASS_WEIGHTS))).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loader = DataLoader(Signals(), batch_size=32, shuffle=True)  # expect: DATA001

for epoch in range(1000):
    for batch_idx, (signal, label) in enumerate(loader):
        label = label.to(device)  # expect-run: COPY001
        noise = sample_noise(*signal.shape).to(device)  # expect-run: COPY002
        weights = torch.cuda.FloatTensor(CLASS_WEIGHTS) if use_cuda else torch.FloatTensor(CLASS_WEIGHTS)  # expect-run: COPY001
        loss = nn.functional.cross_entropy(model(signal + noise), label, weight=weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if batch_idx % 20 == 0:
            print(f"epoch {epoch} batch {batch_idx} loss {loss.item():.4f}")
