"""A trainer that picks its device in a shared helper (torch.accelerator) and asks for the fused AdamW
kernel on CUDA through **kwargs built by that helper, and for its second optimizer through a dict its
own function fills on the CUDA path. On a CPU run neither optimizer is fused, and neither may be
reported as missing fused=True: the script asks for it where it exists."""
import torch
from common.device import optimizer_kwargs, pick_device
from torch import nn


class Trainer:
    def __init__(self, model, device):
        self.model, self.device = model.to(device), device
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.01,  # ok: OPT001
                                           **optimizer_kwargs(device))
        head_kwargs = {"lr": 1e-4}
        if device.type == "cuda":
            head_kwargs["fused"] = True
        self.head_optimizer = torch.optim.Adam(self.model[-1].parameters(), **head_kwargs)  # ok: OPT001

    def step(self, x, y):
        self.optimizer.zero_grad(set_to_none=True)
        self.head_optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        self.head_optimizer.step()
        return loss.detach()


def main():
    device = pick_device()
    model = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.GELU()) for _ in range(6)], nn.Linear(64, 1))
    trainer = Trainer(model, device)
    x, y = torch.randn(256, 64, device=device), torch.randn(256, 1, device=device)
    total = torch.zeros((), device=device)
    for step in range(100_000):
        total += trainer.step(x, y)
        if step % 500 == 0:
            print(f"step {step}: mean loss {(total / (step + 1)).item():.4f}")


if __name__ == "__main__":
    main()
