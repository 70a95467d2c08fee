"""Fine-tune a small GPT-2 (built from its config: no download) with Hugging Face's Trainer, audited by
perfaudit's callback."""
import argparse
import json

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

from perfaudit.integrations.transformers import PerfauditCallback


class RandomTokens(Dataset):
    def __init__(self, n: int = 512, length: int = 32, vocab: int = 256):
        g = torch.Generator().manual_seed(0)
        self.data = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        ids = self.data[i]
        return {"input_ids": ids, "labels": ids.clone()}


class WeightWatcher(TrainerCallback):
    """Stops the run when the weights blow up: reads their norm back every step."""

    def on_step_end(self, args, state, control, model=None, **kwargs):
        norm = torch.stack([p.detach().norm() for p in model.parameters()]).norm()
        if norm.item() > 1e4:
            control.should_training_stop = True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=12)
    parser.add_argument("--debug", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--fail", action="store_true", help="stop the run when perfaudit finds a warning")
    args = parser.parse_args()
    if args.debug:
        torch.autograd.set_detect_anomaly(True)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=1, n_head=2))
    training = TrainingArguments(output_dir="out", max_steps=args.max_steps, per_device_train_batch_size=8,
                                 logging_steps=10, eval_strategy="steps", eval_steps=4, per_device_eval_batch_size=16,
                                 report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True)
    audit = PerfauditCallback(steps=3, warmup=1, fail_on="warning", action="fail" if args.fail else "warn")
    trainer = Trainer(model=model, args=training, train_dataset=RandomTokens(), eval_dataset=RandomTokens(32),
                      callbacks=[WeightWatcher(), audit])
    trainer.train()
    with open("log_history.json", "w") as f:
        json.dump(trainer.state.log_history, f)
    print(f"finished after {trainer.state.global_step} steps")


if __name__ == "__main__":
    main()
