"""A GAN in the shape of the public PyTorch-GAN collection's examples: a `block()` helper builds each layer
of both networks, with BatchNorm after the layer except in the discriminator's first block; a fixed-noise
sample every few iterations; the losses logged with .item() at an interval."""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--latent_dim", type=int, default=32)
parser.add_argument("--img_size", type=int, default=16)
parser.add_argument("--iterations", type=int, default=400)
opt = parser.parse_args()
img_shape = (1, opt.img_size, opt.img_size)


def block(in_feat, out_feat, normalize=True):
    layers = [nn.Linear(in_feat, out_feat)]  # expect-run: BN001
    if normalize:
        layers.append(nn.BatchNorm1d(out_feat, 0.8))
    layers.append(nn.LeakyReLU(0.2, inplace=True))
    return layers


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(
            *block(opt.latent_dim, 64, normalize=False),
            *block(64, 128),
            *block(128, 256),
            nn.Linear(256, int(torch.tensor(img_shape).prod())),
            nn.Tanh(),
        )

    def forward(self, z):
        return self.model(z).view(z.size(0), *img_shape)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(int(torch.tensor(img_shape).prod()), 128), nn.LeakyReLU(0.2, inplace=True),
                                   nn.Linear(128, 1), nn.Sigmoid())

    def forward(self, img):
        return self.model(img.view(img.size(0), -1))


generator, discriminator = Generator(), Discriminator()
adversarial_loss = nn.BCELoss()
optimizer_G = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
real_images = torch.rand(1024, *img_shape) * 2 - 1

for i in range(opt.iterations):
    imgs = real_images[torch.randint(0, len(real_images), (64,))]
    valid, fake = torch.ones(imgs.size(0), 1), torch.zeros(imgs.size(0), 1)
    optimizer_G.zero_grad(set_to_none=True)
    z = torch.randn(imgs.size(0), opt.latent_dim)
    gen_imgs = generator(z)
    g_loss = adversarial_loss(discriminator(gen_imgs), valid)
    g_loss.backward()
    optimizer_G.step()
    optimizer_D.zero_grad(set_to_none=True)
    real_loss = adversarial_loss(discriminator(imgs), valid)
    fake_loss = adversarial_loss(discriminator(gen_imgs.detach()), fake)
    d_loss = (real_loss + fake_loss) / 2
    d_loss.backward()
    optimizer_D.step()
    if i % 100 == 0:
        print(f"[{i}/{opt.iterations}] D loss {d_loss.item():.4f} G loss {g_loss.item():.4f}")
