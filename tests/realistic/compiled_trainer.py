"""A compiled text classifier the way many repos write one: argparse, a Trainer class, torch.compile on
the model, a padding-aware mean pooling helper, shuffled batches cut from tensors held in memory, a
logging interval. The pooling helper divides by the number of real tokens read with `.item()`: inside the
compiled forward that is a graph break on every call."""
import argparse
import logging

import torch
from torch import nn

log = logging.getLogger("train")


def masked_mean(hidden, mask):
    """Mean over the real (unpadded) tokens."""
    n_tokens = mask.sum().item()  # expect-run: COMPILE001, SYNC001
    return (hidden * mask.unsqueeze(-1)).sum(dim=(0, 1)) / max(n_tokens, 1)


class Classifier(nn.Module):
    def __init__(self, vocab: int, dim: int, classes: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.encoder = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens):
        mask = (tokens != 0).float()
        hidden = self.encoder(self.embed(tokens))
        pooled = masked_mean(hidden, mask)
        return self.head(hidden.mean(dim=1) + pooled)


class Trainer:
    def __init__(self, model, batches, lr: float, device):
        self.device = device
        self.model = torch.compile(model.to(device), backend="aot_eager")  # inductor on a GPU box
        self.batches = batches
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        self.criterion = nn.CrossEntropyLoss()
        self.step = 0

    def train_step(self, tokens, labels):
        tokens, labels = tokens.to(self.device), labels.to(self.device)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.criterion(self.model(tokens), labels)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def fit(self, epochs: int, log_every: int):
        for epoch in range(epochs):
            running = torch.zeros((), device=self.device)
            for tokens, labels in self.batches():
                running += self.train_step(tokens, labels)
                self.step += 1
                if self.step % log_every == 0:
                    log.info("epoch %d step %d loss %.4f", epoch, self.step, running.item() / log_every)
                    running.zero_()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    tokens = torch.randint(1, 1000, (2048, 48))
    tokens[:, 40:] = 0  # padding
    labels = torch.randint(0, 4, (2048,))

    def batches():  # a fresh shuffle each epoch; the last, short batch is dropped
        order = torch.randperm(len(tokens))
        for idx in order[: len(order) // args.batch_size * args.batch_size].split(args.batch_size):
            yield tokens[idx], labels[idx]

    Trainer(Classifier(1000, 128, 4), batches, args.lr, device).fit(args.epochs, args.log_every)


if __name__ == "__main__":
    main()
