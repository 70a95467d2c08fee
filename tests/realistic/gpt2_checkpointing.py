"""A custom loop over a GPT-2 built from its config (transformers) with activation checkpointing on
(`model.gradient_checkpointing_enable()`, torch's non-reentrant checkpoint), bf16 autocast on the device,
AdamW on a cosine schedule from transformers, labels = input_ids, perplexity logged every 20 steps. On the
emulated device the checkpointed blocks are recomputed in the backward pass, where GPT-2's `gelu_new` runs
`pow` in float32 under CUDA's autocast policy, as the forward did."""
import math

import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import GPT2Config, GPT2LMHeadModel, get_cosine_schedule_with_warmup

device = "cuda" if torch.cuda.is_available() else "cpu"


def main():
    config = GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=2048, n_positions=128,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).to(device)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    data = TensorDataset(torch.randint(0, 2048, (512, 128)))
    loader = DataLoader(data, batch_size=8, shuffle=True, drop_last=True)  # expect-lint: DATA001
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    scheduler = get_cosine_schedule_with_warmup(optimizer, 10, 200)
    model.train()
    step = 0
    for epoch in range(3):
        for (input_ids,) in loader:
            input_ids = input_ids.to(device)
            with torch.autocast(device_type="cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
                out = model(input_ids=input_ids, labels=input_ids)  # expect-run: SYNC001 (transformers' own read)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step % 20 == 0:
                print(step, math.exp(out.loss.item()))


if __name__ == "__main__":
    main()
