"""Train a small CNN on synthetic images with Lightning, audited by perfaudit's callback."""
import argparse

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from perfaudit.integrations.lightning import PerfauditCallback


class ImageData(L.LightningDataModule):
    def __init__(self, batch_size: int = 32):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(640, 3, 16, 16, generator=g)
        y = torch.randint(0, 10, (640,), generator=g)
        self.train_set, self.val_set = TensorDataset(x[:512], y[:512]), TensorDataset(x[512:], y[512:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=64)


class SmallCNN(L.LightningModule):
    def __init__(self, lr: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(32, 10)
        self.losses = []

    def forward(self, x):
        return self.head(self.features(x).flatten(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.losses.append(loss.item())
        if batch_idx % 10 == 0:
            self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, weight_decay=1e-4, foreach=False)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--fail", action="store_true", help="stop the run when perfaudit finds a warning")
    parser.add_argument("--accelerator", default="cpu", help="cpu, gpu or auto (Lightning's choice)")
    args = parser.parse_args()
    audit = PerfauditCallback(steps=3, warmup=1, fail_on="warning", action="fail" if args.fail else "warn")
    trainer = L.Trainer(max_epochs=args.epochs, accelerator=args.accelerator, devices=1, logger=CSVLogger("logs"),
                        callbacks=[audit], val_check_interval=4, limit_val_batches=2,
                        enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
    trainer.fit(SmallCNN(), datamodule=ImageData())
    print(f"finished after {trainer.global_step} steps")


if __name__ == "__main__":
    main()
