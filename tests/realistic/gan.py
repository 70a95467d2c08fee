"""A GAN in the DCGAN example's shape: two networks, two optimizers per iteration, module.zero_grad(),
statistics read with .item() every iteration for the log line. On a GPU both Adams take foreach where a
fused kernel exists: OPT001 names each optimizer's line, the class's step time shared between them."""
import torch
from torch import nn

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
nz, dim = 16, 64
netG = nn.Sequential(nn.Linear(nz, 128), nn.ReLU(True), nn.Linear(128, dim), nn.Tanh()).to(device)
netD = nn.Sequential(nn.Linear(dim, 128), nn.LeakyReLU(0.2, inplace=True), nn.Linear(128, 1), nn.Sigmoid()).to(device)
criterion = nn.BCELoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
real_data = torch.randn(4096, dim, device=device)

for epoch in range(100):
    for i in range(0, len(real_data), 64):
        real = real_data[i:i + 64]
        b = real.size(0)
        label = torch.full((b,), 1.0, device=device)
        netD.zero_grad()
        output = netD(real).view(-1)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()  # expect: SYNC001
        noise = torch.randn(b, nz, device=device)
        fake = netG(noise)
        label.fill_(0.0)
        output = netD(fake.detach()).view(-1)
        errD_fake = criterion(output, label)
        errD_fake.backward()
        optimizerD.step()
        netG.zero_grad()
        label.fill_(1.0)
        output = netD(fake).view(-1)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean().item()  # expect: SYNC001
        optimizerG.step()
        if i % 1024 == 0:
            print(f"[{epoch}][{i}] Loss_D {(errD_real + errD_fake).item():.4f} Loss_G {errG.item():.4f}"
                  f" D(x) {D_x:.4f} D(G(z)) {D_G_z2:.4f}")
