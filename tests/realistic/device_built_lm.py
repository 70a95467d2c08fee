"""A small language-model trainer written the modern way: the model built directly on the device
(`device=` factory kwargs, a bias made under a `torch.device` context), a Trainer class, main(), batches
drawn with next(iter(...)), a loss logged with .item() every step. Its CUDA branch is the one that runs on
the emulated device (it was reported as "CUDA path offered but not taken": the parameters stayed on the host)."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class TinyLM(nn.Module):
    def __init__(self, vocab, width, device=None):
        super().__init__()
        self.embed = nn.Embedding(vocab, width, device=device)
        self.mix = nn.Linear(width, width, device=device)
        self.head = nn.Linear(width, vocab, device=device)

    def forward(self, tokens):
        return self.head(torch.relu(self.mix(self.embed(tokens))))


class Trainer:
    def __init__(self, model, loader, device):
        self.model, self.loader, self.device = model, loader, device
        self.opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        self.batches = iter(loader)

    def next_batch(self):
        try:
            tokens, = next(self.batches)
        except StopIteration:
            self.batches = iter(self.loader)
            tokens, = next(self.batches)
        return tokens.to(self.device)

    def step(self, i):
        tokens = self.next_batch()
        logits = self.model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        print(f"step {i} loss {loss.item():.3f}")  # expect: SYNC001


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with torch.device(device):
        head_bias = torch.zeros(4096)
    model = TinyLM(4096, 256, device=device)
    model.head.bias = nn.Parameter(head_bias)
    data = TensorDataset(torch.randint(0, 4096, (2048, 65)))
    trainer = Trainer(model, DataLoader(data, batch_size=32, shuffle=True), device)  # expect: DATA001
    for i in range(args.steps):
        trainer.step(i)


if __name__ == "__main__":
    main()
