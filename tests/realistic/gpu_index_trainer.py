"""The single-GPU starting point of the DDP tutorial series (pytorch/examples distributed/ddp-tutorial-series):
a Trainer given a bare GPU index (`gpu_id = 0`, "shorthand for cuda:0") that moves its model with
`model.to(gpu_id)` and each batch with `.to(self.gpu_id)`, prints the batch size from `next(iter(loader))` at
every epoch, snapshots the model every few epochs, and loads synthetic regression data from a pinned loader in
the training process. A CPU-only build refuses a bare index: it asks for an accelerator it does not have."""
import argparse
import os
import tempfile

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class SyntheticRegression(Dataset):
    def __init__(self, size):
        self.size = size
        self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.data[index]


class Trainer:
    def __init__(self, model: torch.nn.Module, train_data: DataLoader, optimizer: torch.optim.Optimizer,
                 gpu_id: int, save_every: int, snapshot_dir: str) -> None:
        self.gpu_id = gpu_id
        self.model = model.to(gpu_id)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = os.path.join(snapshot_dir, "checkpoint.pt")
        self.seen = torch.zeros((), dtype=torch.long, device=gpu_id)

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()
        self.seen += source.shape[0]

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[GPU{self.gpu_id}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {len(self.train_data)}")
        for source, targets in self.train_data:
            source = source.to(self.gpu_id)  # expect-run: COPY001
            targets = targets.to(self.gpu_id)  # expect-run: COPY001
            self._run_batch(source, targets)

    def _save_checkpoint(self, epoch):
        torch.save(self.model.state_dict(), self.snapshot_path)
        print(f"Epoch {epoch} | Training checkpoint saved at {self.snapshot_path}")

    def train(self, max_epochs: int):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            if epoch % self.save_every == 0:
                self._save_checkpoint(epoch)


def load_train_objs():
    train_set = SyntheticRegression(2048)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    return train_set, model, optimizer


def prepare_dataloader(dataset: Dataset, batch_size: int):
    return DataLoader(dataset, batch_size=batch_size, pin_memory=True, shuffle=True)  # expect: DATA001


def main(device, total_epochs, save_every, batch_size):
    dataset, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(dataset, batch_size)
    with tempfile.TemporaryDirectory() as snapshots:
        trainer = Trainer(model, train_data, optimizer, device, save_every, snapshots)
        trainer.train(total_epochs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simple single-GPU training job")
    parser.add_argument("total_epochs", type=int, nargs="?", default=20, help="Total epochs to train the model")
    parser.add_argument("save_every", type=int, nargs="?", default=5, help="How often to save a snapshot")
    parser.add_argument("--batch_size", default=32, type=int, help="Input batch size on each device")
    args = parser.parse_args()

    device = 0  # shorthand for cuda:0
    main(device, args.total_epochs, args.save_every, args.batch_size)
