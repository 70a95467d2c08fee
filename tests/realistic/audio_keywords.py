"""Keyword spotting on log-mel spectrograms computed on the GPU (torchaudio-free, tutorial style): the STFT
window made on the host in every forward and moved, unpinned batches, a per-step accuracy read."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

device = "cuda" if torch.cuda.is_available() else "cpu"
SR, N_FFT, HOP, N_MELS = 16000, 400, 160, 40


class Clips(Dataset):
    def __init__(self, n=256):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        label = i % 10
        t = torch.arange(SR) / SR
        wave = torch.sin(2 * math.pi * (200 + 50 * label) * t) + 0.1 * torch.randn(SR, generator=g)
        return wave, label


def mel_filters(n_mels, n_fft, sr):
    freqs = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    mel = 2595 * torch.log10(1 + freqs / 700)
    edges = torch.linspace(mel.min(), mel.max(), n_mels + 2)
    fb = torch.zeros(n_mels, n_fft // 2 + 1)
    for m in range(1, n_mels + 1):
        left, center, right = edges[m - 1], edges[m], edges[m + 1]
        up = (mel - left) / (center - left)
        down = (right - mel) / (right - center)
        fb[m - 1] = torch.clamp(torch.minimum(up, down), min=0)
    return fb


class LogMel(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("fb", mel_filters(N_MELS, N_FFT, SR))

    def forward(self, wave):
        window = torch.hann_window(N_FFT).to(wave.device)  # expect-run: COPY002
        spec = torch.stft(wave, N_FFT, HOP, window=window, return_complex=True).abs() ** 2
        return torch.log(self.fb @ spec + 1e-6)


class KWS(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = LogMel()
        self.conv = nn.Sequential(nn.Conv1d(N_MELS, 64, 3, padding=1), nn.ReLU(), nn.Conv1d(64, 64, 3, padding=1),
                                  nn.ReLU(), nn.AdaptiveMaxPool1d(1), nn.Flatten())
        self.out = nn.Linear(64, 10)

    def forward(self, wave):
        return self.out(self.conv(self.features(wave)))


model = KWS().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # expect-run: CUDNN001
loader = DataLoader(Clips(), batch_size=16, shuffle=True, num_workers=2)
for epoch in range(3):
    correct = total = 0
    for wave, label in loader:
        wave, label = wave.to(device), label.to(device)  # expect-run: COPY001
        logits = model(wave)
        loss = F.cross_entropy(logits, label)
        opt.zero_grad()
        loss.backward()
        opt.step()
        correct += (logits.argmax(1) == label).sum().item()  # expect: SYNC001
        total += label.numel()
    print(f"epoch {epoch} acc {correct / total:.3f}")
