"""Curve fitting with LBFGS: the optimizer evaluates a closure many times per step, and one step may
run the whole fit."""
import torch

torch.manual_seed(0)
x = torch.linspace(-3, 3, 2048).unsqueeze(1)
y = torch.sin(x) + 0.1 * torch.randn_like(x)
model = torch.nn.Sequential(torch.nn.Linear(1, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=100_000, history_size=20)
history = []


def closure():
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    history.append(loss.item())  # expect: SYNC001
    return loss


for epoch in range(10):
    optimizer.step(closure)
    print(epoch, history[-1])
