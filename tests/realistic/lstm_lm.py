"""A word-level LSTM language model as in the word_language_model example: no torch.optim (a manual
SGD update), hidden state repackaged between batches, gradient clipping, the loss summed with .item()."""
import torch
from torch import nn

ntokens, emsize, nhid, bptt, batch_size, lr, clip = 500, 64, 64, 20, 16, 20.0, 0.25
corpus = torch.randint(0, ntokens, (40_000,))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data[:nbatch * bsz].view(bsz, -1).t().contiguous()


def get_batch(source, i):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


def repackage_hidden(h):
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(ntokens, emsize)
        self.rnn = nn.LSTM(emsize, nhid, 2)
        self.decoder = nn.Linear(nhid, ntokens)

    def forward(self, inp, hidden):
        output, hidden = self.rnn(self.encoder(inp), hidden)
        return self.decoder(output).view(-1, ntokens), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(2, bsz, nhid), weight.new_zeros(2, bsz, nhid))


def train(model, train_data, criterion):
    model.train()
    total_loss = 0.0
    hidden = model.init_hidden(batch_size)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
        data, targets = get_batch(train_data, i)
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        total_loss += loss.item()  # expect: SYNC001
        if batch % 200 == 0 and batch > 0:
            print(f"batch {batch} loss {total_loss / 200:.2f}")
            total_loss = 0.0


if __name__ == "__main__":
    model = RNNModel()
    train_data = batchify(corpus, batch_size)
    for epoch in range(1, 1000):
        train(model, train_data, nn.CrossEntropyLoss())
