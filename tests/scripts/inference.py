"""Inference only: no optimizer, no backward, no DataLoader."""
import torch
from torch import nn

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).eval()
with torch.inference_mode():
    for i in range(1_000_000):
        logits = model(torch.randn(16, 32))
        preds = logits.argmax(-1).tolist()
