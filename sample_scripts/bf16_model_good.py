"""T18 the other way: a model kept in bfloat16 itself (`model.to(torch.bfloat16)`, as memory-bound LLM
fine-tuning does), with no autocast region. Its matrix math runs in 16 bits on a GPU already: AMP002, which
looks for float32 math outside autocast, stays silent."""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
dim = 256
model = nn.Sequential(*[nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
                        for _ in range(4)], nn.Linear(dim, 10)).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
inputs = torch.randn(128, dim, device=device, dtype=torch.bfloat16)
labels = torch.randint(0, 10, (128,), device=device)

for step in range(1_000_000):
    loss = nn.functional.cross_entropy(model(inputs).float(), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
