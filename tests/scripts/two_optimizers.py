"""GAN-style: two optimizers per iteration count as one step."""
import torch

g, d = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
opt_g = torch.optim.SGD(g.parameters(), lr=0.1)
opt_d = torch.optim.SGD(d.parameters(), lr=0.1)
for step in range(1_000_000):
    opt_d.zero_grad()
    d(g(torch.randn(8, 4)).detach()).mean().backward()
    opt_d.step()
    opt_g.zero_grad()
    (-d(g(torch.randn(8, 4)))).mean().backward()
    opt_g.step()
