"""An older-style sequence classifier on its CUDA branch, the way pre-1.0 era examples and their
descendants still read: the legacy `torch.cuda.FloatTensor` type chosen once and applied with
`.type(dtype)`, an LSTM whose weights are re-flattened each step, the model wrapped in
`nn.DataParallel` whenever CUDA is there, a background thread that prefetches the next batch onto
the device, and the GPU's memory logged as a ratio at an interval. Every one of those must simply
run on the emulated device: the report is the GPU branch's."""
import queue
import threading

import torch
from torch import nn

use_cuda = torch.cuda.is_available()
dtype = torch.cuda.FloatTensor if use_cuda else torch.FloatTensor
ltype = torch.cuda.LongTensor if use_cuda else torch.LongTensor


class Classifier(nn.Module):
    def __init__(self, vocab=500, dim=64, hidden=128, classes=5):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, tokens):
        self.rnn.flatten_parameters()
        out, _ = self.rnn(self.embed(tokens))
        return self.head(out[:, -1])


def batches(n_batches, batch=32, length=24, vocab=500, classes=5):
    g = torch.Generator().manual_seed(0)
    for _ in range(n_batches):
        yield torch.randint(0, vocab, (batch, length), generator=g), torch.randint(0, classes, (batch,), generator=g)


class Prefetcher:
    """Moves the next batch to the device on a side thread while the step runs."""

    def __init__(self, source, depth=2):
        self.queue = queue.Queue(maxsize=depth)
        self.thread = threading.Thread(target=self._run, args=(source,), daemon=True)
        self.thread.start()

    def _run(self, source):
        for tokens, labels in source:
            self.queue.put((tokens.type(ltype), labels.type(ltype)))
        self.queue.put(None)

    def __iter__(self):
        while (item := self.queue.get()) is not None:
            yield item


def main():
    model = Classifier()
    if use_cuda:
        model = nn.DataParallel(model).cuda()  # expect: DIST001
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step, (tokens, labels) in enumerate(Prefetcher(batches(100_000))):
        noise = torch.randn(tokens.size(0), 5).type(dtype)  # expect-run: COPY002
        loss = nn.functional.cross_entropy(model(tokens) + 0.01 * noise, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if use_cuda and step % 50 == 0:
            used = torch.cuda.memory_allocated() / torch.cuda.memory_reserved()
            print(f"step {step} loss {loss.detach().cpu().item():.3f} memory {100 * used:.0f}% of reserved")


if __name__ == "__main__":
    main()
