"""A small dataset kept on the GPU, as tutorials do to skip host-to-device copies: the Dataset moves its
tensors to the device once and `__getitem__` slices them there, one item at a time, through a plain
DataLoader. Worker processes cannot make CUDA tensors and pin_memory cannot pin them: the advice is to
index whole batches, and `fix` must not add workers or pinning."""
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class ResidentDataset(Dataset):
    def __init__(self, n: int = 4096, features: int = 64):
        self.x = torch.randn(n, features).to(device)
        self.y = torch.randint(0, 4, (n,)).to(device)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def train(epochs: int = 100):
    loader = DataLoader(ResidentDataset(), batch_size=64, shuffle=True)  # expect: DATA001
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    train()
