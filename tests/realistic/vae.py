"""A variational autoencoder as in the PyTorch examples: DataLoader keyword arguments chosen by device,
the loss accumulated with .item() every batch, a log interval. A CPU-only run audits its CUDA branch
(emulated): one loader worker with pinned memory, and Adam on CUDA parameters takes its foreach path."""
import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


class MNISTLike(Dataset):
    """Stands for torchvision's MNIST, decoded and normalised once (the worker's share per batch is small: the
    single worker keeps up with the step, on a GPU too)."""

    def __init__(self, n=6000):
        images = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8).to(torch.float32).div(255.0)
        self.images = (images - images.mean()) / (images.std() + 1e-6)  # decoded once, as a cached dataset

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return (torch.sigmoid(self.images[i]).view(1, 28, 28),)


use_cuda = torch.cuda.is_available()
device = torch.device("cuda" if use_cuda else "cpu")
kwargs = {"num_workers": 1, "pin_memory": True} if use_cuda else {}
train_loader = DataLoader(MNISTLike(), batch_size=128, shuffle=True, **kwargs)  # ok: DATA001  (a worker on its CUDA path)


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        return mu + torch.randn_like(std) * std

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


model = VAE().to(device)
optimizer = optim.Adam(model.parameters(), lr=1e-3)  # foreach on its CUDA path: OPT001 info (fused exists)


def train(epoch):
    model.train()
    train_loss = 0
    for batch_idx, (data,) in enumerate(train_loader):
        data = data.to(device)
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        train_loss += loss.item()  # expect: SYNC001
        optimizer.step()
        if batch_idx % 100 == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}]\tLoss: {loss.item() / len(data):.6f}")
    print(f"====> Epoch: {epoch} Average loss: {train_loss / len(train_loader.dataset):.4f}")


if __name__ == "__main__":
    for epoch in range(1, 1000):
        train(epoch)
