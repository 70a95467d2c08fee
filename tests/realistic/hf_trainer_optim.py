"""Fine-tuning a small classifier with the Hugging Face Trainer, the optimizer chosen by name: "adamw_torch"
is torch's AdamW without fused=, where the Trainer's own default (torch >= 2.8) is the fused kernel. The
Trainer builds the optimizer, so the finding and its fix belong on the option's line. The Trainer reads the
loss on the host every step (its nan/inf filter): a device sync at the train() call; the optimizer's reads
of its own step counters (host tensors) are none."""
import torch
from torch import nn
from transformers import Trainer, TrainingArguments


class Classifier(nn.Module):
    def __init__(self, dim=64, classes=4):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU())
        self.head = nn.Linear(256, classes)

    def forward(self, features, labels=None):
        logits = self.head(self.body(features))
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


class Features(torch.utils.data.Dataset):
    def __init__(self, n=4096, dim=64):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = self.x[:, :4].argmax(1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"features": self.x[i], "labels": self.y[i]}


args = TrainingArguments(
    output_dir="out", per_device_train_batch_size=64, num_train_epochs=3, learning_rate=3e-4,
    optim="adamw_torch", logging_steps=50, save_strategy="no", report_to=[], dataloader_num_workers=2,  # expect-run: OPT001
)
trainer = Trainer(model=Classifier(), args=args, train_dataset=Features())
trainer.train()  # expect-run: SYNC001
