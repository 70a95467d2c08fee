"""T08 minor: a vision transformer whose only convolution is its patch embedding (stride = kernel), with
cudnn.benchmark off. The convolution carries under 1 % of the step's math: CUDNN001 says so as info."""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class TinyViT(nn.Module):
    def __init__(self, dim=128, depth=2, patch=4):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        layer = nn.TransformerEncoderLayer(dim, 4, dim * 4, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        tokens = self.embed(x).flatten(2).transpose(1, 2)
        return self.head(self.blocks(tokens).mean(1))


model = TinyViT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)  # expect-run: CUDNN001
images = torch.randn(32, 3, 32, 32, device=device)
labels = torch.randint(0, 10, (32,), device=device)

for step in range(1_000_000):
    optimizer.zero_grad()
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        loss = nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
