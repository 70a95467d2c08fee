import torch

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(20):
    opt.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
raise ValueError("evaluation failed after training")
