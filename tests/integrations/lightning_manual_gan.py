"""A GAN in Lightning with manual optimization (the pattern of Lightning's docs): `automatic_optimization =
False`, the discriminator's and the generator's steps taken in `training_step` with `manual_backward`, each
optimizer toggled around its own; `accelerator="auto"`."""
import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class GAN(L.LightningModule):
    def __init__(self, nz=16, dim=32):
        super().__init__()
        self.automatic_optimization = False
        self.nz = nz
        self.G = nn.Sequential(nn.Linear(nz, 64), nn.ReLU(), nn.Linear(64, dim))
        self.D = nn.Sequential(nn.Linear(dim, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))

    def training_step(self, batch, batch_idx):
        (real,) = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(real.size(0), self.nz, device=self.device)
        fake = self.G(z)
        self.toggle_optimizer(opt_d)
        d_loss = F.binary_cross_entropy_with_logits(self.D(real), torch.ones(real.size(0), 1, device=self.device)) + \
            F.binary_cross_entropy_with_logits(self.D(fake.detach()), torch.zeros(real.size(0), 1, device=self.device))
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        self.untoggle_optimizer(opt_d)
        self.toggle_optimizer(opt_g)
        g_loss = F.binary_cross_entropy_with_logits(self.D(fake), torch.ones(real.size(0), 1).type_as(real))
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.untoggle_optimizer(opt_g)
        self.log_dict({"d_loss": d_loss, "g_loss": g_loss}, prog_bar=True)

    def configure_optimizers(self):
        return [torch.optim.Adam(self.G.parameters(), lr=2e-4), torch.optim.Adam(self.D.parameters(), lr=2e-4)]


if __name__ == "__main__":
    data = DataLoader(TensorDataset(torch.randn(4096, 32)), batch_size=64, shuffle=True)
    trainer = L.Trainer(max_epochs=1, accelerator="auto", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False)
    trainer.fit(GAN(), data)
