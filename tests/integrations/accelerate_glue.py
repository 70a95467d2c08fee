"""A sentence-pair classifier trained as Hugging Face's Accelerate examples write it (nlp_example.py): fp16
mixed precision, prepare() on the model, optimizer and both loaders, accelerator.backward, a warm-up
scheduler, gather_for_metrics in the evaluation, accelerator.print. `--pinned`: the loader pinned and the
Accelerator's copies non-blocking (what COPY001 asks of an Accelerate script)."""
import argparse

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Pairs(Dataset):
    def __init__(self, n=1024, length=32, vocab=2000):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, vocab, (n, length), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


class Classifier(nn.Module):
    def __init__(self, vocab=2000, d=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 4, 128, batch_first=True), 1)
        self.out = nn.Linear(d, 2)

    def forward(self, input_ids, labels=None):
        logits = self.out(self.enc(self.emb(input_ids)).mean(1))
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return loss, logits


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pinned", action="store_true")
    args = parser.parse_args()
    if args.pinned:
        accelerator = Accelerator(mixed_precision="fp16", dataloader_config=DataLoaderConfiguration(non_blocking=True))
    else:
        accelerator = Accelerator(mixed_precision="fp16")
    train_dl = DataLoader(Pairs(), batch_size=32, shuffle=True, pin_memory=args.pinned)
    eval_dl = DataLoader(Pairs(128), batch_size=64)
    model = Classifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    model, optimizer, train_dl, eval_dl = accelerator.prepare(model, optimizer, train_dl, eval_dl)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 100))
    for epoch in range(2):
        model.train()
        for batch in train_dl:
            loss, _ = model(**batch)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        model.eval()
        correct = total = 0
        for batch in eval_dl:
            with torch.no_grad():
                _, logits = model(**batch)
            preds, refs = accelerator.gather_for_metrics((logits.argmax(-1), batch["labels"]))
            correct += (preds == refs).sum().item()
            total += refs.numel()
        accelerator.print(f"epoch {epoch}: accuracy {correct / total:.3f}")


if __name__ == "__main__":
    main()
