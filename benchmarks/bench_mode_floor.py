"""The floor under the emulated CUDA device's cost: a TorchFunctionMode that does nothing at all, against no
mode, on the same tiny-op training step under the profiler with Python stacks (as `perfaudit run` records).

    python benchmarks/bench_mode_floor.py            # 4 rounds, alternating, 30 steps each

The emulated device (perfaudit/collect/emulation/placement.py) is a TorchFunctionMode: every torch call of
the script enters Python once, and the profiler records that frame. This measures what that entry alone
costs, so bench_emulation.py's step ratio can be read against it: what is above the floor is the mode's
bookkeeping. The step is cuda_legacy_loop.py's on its CPU branch (a 256-128-8 MLP, batch 32, each sample
moved in `__getitem__`, SGD with momentum): about 1 ms, 100 torch calls.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DataLoader, Dataset

WEIGHTS = [1.0, 2.0, 1.0, 0.5, 1.0, 1.0, 3.0, 1.0]


class Signals(Dataset):
    def __init__(self, n: int = 1024):
        self.data = [torch.sin(torch.linspace(0, 3.14 * (i % 7 + 1), 256)) for i in range(n)]

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i].to("cpu"), i % len(WEIGHTS)


class Nothing(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def median_step_ms(n: int) -> float:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, len(WEIGHTS)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batches = iter(DataLoader(Signals(), batch_size=32, shuffle=True))
    times = []
    for _ in range(n):
        start = time.perf_counter()
        signal, label = next(batches)
        noise = (0.05 * torch.randn(*signal.shape)).to("cpu")
        loss = nn.functional.cross_entropy(model(signal + noise), label, weight=torch.FloatTensor(WEIGHTS))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[5:]) * 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30)
    opts = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {opts.rounds} rounds, alternating")
    results: dict[str, list[float]] = {"no mode": [], "a mode that does nothing": []}
    for r in range(opts.rounds):
        for name in (list(results) if r % 2 == 0 else list(results)[::-1]):
            with profile(activities=[ProfilerActivity.CPU], with_stack=True, record_shapes=True):
                if name == "no mode":
                    results[name].append(median_step_ms(opts.steps))
                else:
                    with Nothing():
                        results[name].append(median_step_ms(opts.steps))
    plain = statistics.median(results["no mode"])
    for name, values in results.items():
        step = statistics.median(values)
        print(f"{name:<26} step {step:6.3f} ms   ratio {step / plain:4.2f}")


if __name__ == "__main__":
    main()
