"""A fine-tuning trainer with a tiny dataset, as in few-shot recipes: an epoch is three batches, and
after every epoch it evaluates on a validation loader with larger batches and writes a sample of
generated output. Its training samples are tokenized text, prepared in the training process (DATA001).
Those evaluation passes fall inside the first steps: they must not size the trace,
be averaged into the step, or make the input shapes look varying (SHAPE001)."""
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset


class PromptDataset(Dataset):
    """Few-shot prompts, tokenized per character as they are fetched (a stand-in for a tokenizer)."""

    def __init__(self, n, vocab=64, length=16):
        g = torch.Generator().manual_seed(0)
        words = ["the", "model", "answers", "question", "with", "a", "short", "reply", "context", "of"]
        self.texts = [" ".join(words[i] for i in torch.randint(0, len(words), (120,), generator=g).tolist())
                      for _ in range(n)]
        self.vocab, self.length = vocab, length

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        text = " ".join(self.texts[i].lower().split())
        ids = [ord(c) % self.vocab for c in text]
        ids = ids[-(self.length + 1):]  # the end of the prompt, where the answer starts
        tokens = torch.tensor(ids)
        return tokens[:-1], tokens[1:]


class TinyLM(nn.Module):
    def __init__(self, vocab=64, dim=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.body = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.head(self.body(self.embed(tokens)))

    @torch.no_grad()
    def generate(self, prompt, steps=32):
        tokens = prompt
        for _ in range(steps):
            nxt = self(tokens)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
        return tokens


class Trainer:
    def __init__(self):
        torch.manual_seed(0)
        self.model = TinyLM()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-4, foreach=True)
        train = PromptDataset(96)
        val = TensorDataset(torch.randint(0, 64, (400, 16)), torch.randint(0, 64, (400, 16)))
        self.train_loader = DataLoader(train, batch_size=32, shuffle=True, drop_last=True)  # expect: DATA001
        self.val_loader = DataLoader(val, batch_size=100)  # expect-lint: DATA001

    def evaluate(self):
        self.model.eval()
        with torch.no_grad():
            total = sum(nn.functional.cross_entropy(self.model(x).flatten(0, 1), y.flatten()) for x, y in self.val_loader)
        sample = self.model.generate(torch.zeros(1, 1, dtype=torch.long))
        self.model.train()
        return total / len(self.val_loader), sample

    def fit(self, epochs):
        for epoch in range(epochs):
            for x, y in self.train_loader:
                self.optimizer.zero_grad(set_to_none=True)
                loss = nn.functional.cross_entropy(self.model(x).flatten(0, 1), y.flatten())
                loss.backward()
                self.optimizer.step()
            val_loss, sample = self.evaluate()
            if epoch % 50 == 0:
                print(f"epoch {epoch}: val {val_loss.item():.3f}, sample {sample[0, :8].tolist()}")


if __name__ == "__main__":
    Trainer().fit(10_000)
