"""Record, on a real GPU, the allocator history perfaudit's GPU memory probe replays (tests/data/h100_runs/).

    python benchmarks/gpu_memory_fixture.py OUT.json.gz

A small image classifier (convolutions, BatchNorm, a linear head; Adam) trains four steps; the probe
(collect/probes/gpu_memory.py) watches steps 3 and 4 as `perfaudit run` does, and what its replay was given
(the history, the bytes allocated at the start, the blocks' categories) is saved with its result and torch's
own peak, so that a test replays a real history on a machine without a GPU.
"""
from __future__ import annotations

import gzip
import json
import sys

import torch
from torch import nn

from perfaudit.collect.probes import gpu_memory


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    captured: dict = {}
    replay = gpu_memory.peak_of_history

    def capture(trace, start, categories, baseline):
        captured.update(trace=trace, start=start, categories=categories, baseline=baseline)
        return replay(trace, start, categories, baseline)
    gpu_memory.peak_of_history = capture
    probe = gpu_memory.GpuMemory(lambda: [optimizer])
    for step in range(4):
        if step == 2:
            torch.cuda.reset_peak_memory_stats()  # torch's counter over the same steps, to check the replay by
            probe.start()                         # (the probe itself leaves the counters alone)
        images = torch.randn(64, 3, 64, 64, device="cuda")
        labels = torch.randint(0, 10, (64,), device="cuda")
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    probe.stop()
    captured.update(result=probe.result, torch_peak_allocated=torch.cuda.max_memory_allocated(),
                    device=torch.cuda.get_device_name(), torch=torch.__version__)
    captured["categories"] = {str(a): c for a, c in captured["categories"].items()}  # JSON keys are strings
    captured["baseline"] = {str(a): n for a, n in captured["baseline"].items()}
    keep = ("action", "addr", "size", "stream", "frames")
    captured["trace"] = [{k: e[k] for k in keep if k in e} for e in captured["trace"]]
    with gzip.open(sys.argv[1], "wt") as f:
        json.dump(captured, f)
    print({k: v for k, v in probe.result.items() if k != "top_sites"}, probe.result["top_sites"][:3])


if __name__ == "__main__":
    main()
