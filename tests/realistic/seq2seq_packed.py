"""A GRU encoder-decoder with teacher forcing and packed sequences, as seq2seq tutorials write it: sentences
tokenised and noised per item in the main process, a collate that sorts by length, `pack_padded_sequence`
with the lengths on the CPU (as torch requires on a GPU too), a bidirectional encoder, a decoder stepped one
token at a time, an outputs buffer made on the host and moved, gradient clipping and a loss read every step.
On the emulated device the packed batch sizes stay on the host (PackedSequence refuses any other), and the
GRU's reads of them are no syncs."""
import random
import time

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

PAD, SOS, EOS = 0, 1, 2
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class ReverseTask(Dataset):
    """Sentences kept as text, tokenised and noised (words dropped, as denoising seq2seq does) per item."""

    def __init__(self, n=2000, vocab=50, drop=0.1):
        rnd = random.Random(1)
        self.words = [f"w{i}" for i in range(vocab)]
        self.ids = {w: i for i, w in enumerate(self.words)}
        self.sentences = [" ".join(rnd.choice(self.words[3:]) for _ in range(rnd.randint(5, 12))) for _ in range(n)]
        self.drop = drop

    def __len__(self):
        return len(self.sentences)

    def encode(self, sentence):
        return [self.ids[w] for w in sentence.split()]

    def __getitem__(self, i):
        tgt = self.encode(self.sentences[i])[::-1]
        src = [t for t in self.encode(self.sentences[i]) if random.random() >= self.drop] or tgt[-1:]
        return torch.tensor(src + [EOS]), torch.tensor([SOS] + tgt + [EOS])


def collate(batch):
    batch.sort(key=lambda p: len(p[0]), reverse=True)
    srcs, tgts = zip(*batch)
    lengths = torch.tensor([len(s) for s in srcs])
    return pad_sequence(srcs, padding_value=PAD), lengths, pad_sequence(tgts, padding_value=PAD)


class Encoder(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden, padding_idx=PAD)
        self.rnn = nn.GRU(hidden, hidden, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, hidden)

    def forward(self, src, lengths):
        packed = pack_padded_sequence(self.embed(src), lengths.cpu())  # ok: SYNC001
        out, h = self.rnn(packed)  # ok: SYNC001
        out, _ = pad_packed_sequence(out)
        return out, torch.tanh(self.fc(torch.cat([h[-2], h[-1]], dim=1)))


class Decoder(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden, padding_idx=PAD)
        self.rnn = nn.GRU(hidden, hidden)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tok, h):
        out, h = self.rnn(self.embed(tok).unsqueeze(0), h.unsqueeze(0))
        return self.out(out.squeeze(0)), h.squeeze(0)


class Seq2Seq(nn.Module):
    def __init__(self, vocab=50, hidden=128):
        super().__init__()
        self.encoder = Encoder(vocab, hidden)
        self.decoder = Decoder(vocab, hidden)
        self.vocab = vocab

    def forward(self, src, lengths, tgt, teacher_forcing=0.5):
        _, h = self.encoder(src, lengths)
        outputs = torch.zeros(tgt.shape[0], tgt.shape[1], self.vocab).to(DEVICE)  # expect-run: COPY002
        tok = tgt[0]
        for t in range(1, tgt.shape[0]):
            logits, h = self.decoder(tok, h)
            outputs[t] = logits
            tok = tgt[t] if random.random() < teacher_forcing else logits.argmax(1)
        return outputs


def train_epoch(model, loader, optimizer, criterion, clip=1.0):
    model.train()
    epoch_loss = 0
    for src, lengths, tgt in loader:
        src, tgt = src.to(DEVICE), tgt.to(DEVICE)
        optimizer.zero_grad()
        out = model(src, lengths, tgt)
        loss = criterion(out[1:].reshape(-1, out.shape[-1]), tgt[1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        epoch_loss += loss.item()  # expect: SYNC001
    return epoch_loss / len(loader)


if __name__ == "__main__":
    model = Seq2Seq().to(DEVICE)
    loader = DataLoader(ReverseTask(), batch_size=128, shuffle=True, collate_fn=collate)  # expect: DATA001
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss(ignore_index=PAD)
    for epoch in range(100):
        start = time.time()
        loss = train_epoch(model, loader, optimizer, criterion)
        print(f"epoch {epoch} loss {loss:.3f} ({time.time() - start:.1f}s)")
