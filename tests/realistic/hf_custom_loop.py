"""A GPT-2 fine-tuning loop as the Hugging Face course writes it (no Trainer): dict batches moved in a
comprehension, an all-ones attention mask (every forward reads it on the host, to run SDPA causal without it),
a warm-up schedule, tqdm with the loss read into its postfix every step."""
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup


class RandomText(Dataset):
    def __init__(self, n=1000, length=64, vocab=1000):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        ids = self.ids[i]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def main():
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    config = GPT2Config(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=4)
    model = GPT2LMHeadModel(config).to(device)
    loader = DataLoader(RandomText(), batch_size=16, shuffle=True)  # expect-lint: DATA001
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
