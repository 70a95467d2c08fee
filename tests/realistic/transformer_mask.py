"""A causal sequence model on nn.TransformerEncoder with a float mask: torch checks the mask with a
device read on every forward, on behalf of the encoder call."""
import torch
from torch import nn


class SequenceModel(nn.Module):
    def __init__(self, d_model=64, nhead=4, layers=2):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=128, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers)
        self.head = nn.Linear(d_model, 1)

    def forward(self, src, mask):
        return self.head(self.encoder(src, mask=mask))  # expect-run: SYNC001


def main(seq_len=32):
    model = SequenceModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    mask = nn.Transformer.generate_square_subsequent_mask(seq_len)
    for step in range(100_000):
        src = torch.randn(8, seq_len, 64)
        if seq_len > 16 and step >= 0:
            target = src[:, :, :1]
        loss = nn.functional.mse_loss(model(src, mask), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
