"""A GPT-2 fine-tuning loop as the Hugging Face course writes it (no Trainer), over raw lines tokenized as the
Dataset reads them, in the training process (DATA001: a tenth of the step on a GPU); dict batches moved in a
comprehension, an all-ones attention mask (every forward reads it on the host, to run SDPA causal without it),
a warm-up schedule, tqdm with the loss read into its postfix every step."""
import random
import zlib

import torch
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup

WORDS = "the a model token train data loss step batch of in to and with for on".split()


class WordTokenizer:
    """A word-level tokenizer with a fixed vocabulary: ids, truncated and padded to `length`."""

    def __init__(self, vocab=1000, length=64, pad_id=0):
        self.vocab, self.length, self.pad_id = {w: i + 1 for i, w in enumerate(WORDS)}, length, pad_id
        self.size = vocab

    def __call__(self, text):
        ids = [self.vocab.get(w, zlib.crc32(w.encode()) % (self.size - 1) + 1) for w in text.lower().split()][: self.length]
        mask = [1] * len(ids) + [0] * (self.length - len(ids))
        ids = ids + [self.pad_id] * (self.length - len(ids))
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}


class RandomText(Dataset):
    """Raw lines tokenized as they are read, the way a custom loop over a text file does it."""

    def __init__(self, tokenizer, n=1000):
        rng = random.Random(0)
        self.lines = [" ".join(rng.choice(WORDS) + str(rng.randrange(40)) for _ in range(80)) for _ in range(n)]
        self.tokenizer = tokenizer

    def __len__(self):
        return len(self.lines)

    def __getitem__(self, i):
        item = self.tokenizer(self.lines[i])
        item["labels"] = item["input_ids"].clone()
        return item


def main():
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    config = GPT2Config(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=4)
    model = GPT2LMHeadModel(config).to(device)
    loader = DataLoader(RandomText(WordTokenizer()), batch_size=16, shuffle=True)  # expect: DATA001
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    epochs = 3
    total = epochs * len(loader)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=100, num_training_steps=total)
    progress = tqdm(range(total), disable=True)
    model.train()
    for epoch in range(epochs):
        for batch in loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            outputs = model(**batch)  # expect-run: SYNC001
            loss = outputs.loss
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            progress.update(1)
            progress.set_postfix(loss=loss.item())  # expect: SYNC001


if __name__ == "__main__":
    main()
