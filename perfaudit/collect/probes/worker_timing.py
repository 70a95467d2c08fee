"""How long DataLoader workers take to make a batch, on their own (tip T06).

The dataset fetchers are wrapped before any worker starts, so forked workers inherit the wrapper.
In a worker it times each batch: the wall time in `fetch` (reading, decoding, collating — waiting on
storage included) less the time the worker waited for a CPU held by another process (its thread's
run-queue delay, Linux). That is the pipeline's own cost per batch, whatever else runs on the machine;
DATA002 compares it with the training step to tell a slow pipeline from a busy machine. Each worker
keeps its totals in a small file of the run folder (`workers/PID-DATASET`), rewritten in place after
every batch. Workers started with `spawn` (macOS's default) are not timed."""
from __future__ import annotations

import os
import time

from ..wrap import patch

_SCHEDSTAT = "/proc/thread-self/schedstat"


def _thread_wait_s() -> float:
    try:
        with open(_SCHEDSTAT, "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


class _WorkerTotals:
    def __init__(self, folder: str, dataset_id: int):
        self.path = os.path.join(folder, f"{os.getpid()}-{dataset_id}")
        self.own = self.wall = self.cpu = 0.0
        self.batches = 0
        self.fd: int | None = None

    def add(self, wall: float, waited: float, cpu: float) -> None:
        self.wall += wall
        self.own += max(wall - waited, 0.0)
        self.cpu += cpu
        self.batches += 1
        try:
            if self.fd is None:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            line = f"{self.own:.6f} {self.wall:.6f} {self.batches} {self.cpu:.6f}\n".ljust(64)
            os.pwrite(self.fd, line.encode(), 0)
        except OSError:
            pass


def install(folder: str) -> None:
    """Wrap the fetchers (in the training process, before workers exist)."""
    import torch.utils.data as data
    from torch.utils.data._utils import fetch

    totals: dict[int, _WorkerTotals] = {}

    def wrapped(original):
        def fetch_timed(self, index):
            if data.get_worker_info() is None:  # the main process loads its own batches: the trace times them
                return original(self, index)
            wall0, wait0, cpu0 = time.perf_counter(), _thread_wait_s(), time.thread_time()
            batch = original(self, index)
            try:
                key = id(self.dataset)
                entry = totals.get(key)
                if entry is None:
                    entry = totals[key] = _WorkerTotals(folder, key)
                entry.add(time.perf_counter() - wall0, _thread_wait_s() - wait0, time.thread_time() - cpu0)
            except Exception:  # timing a batch must never break loading it
                pass
            return batch
        fetch_timed.__wrapped__ = original
        fetch_timed.perfaudit_worker_timing = True
        return fetch_timed

    for cls in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):
        # timed once; another wrapper of perfaudit's (the emulated device sets its fetches aside) is no reason
        # not to time them: it wraps the fetch too, with functools.wraps
        if not getattr(cls.fetch, "perfaudit_worker_timing", False):
            patch(cls, "fetch", wrapped(cls.fetch))


def read(folder: str) -> dict[int, dict]:
    """dataset id -> {own_s, wall_s, cpu_s, batches, workers} summed over the workers that loaded it."""
    out: dict[int, dict] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return out
    for name in names:
        try:
            _, dataset = name.split("-", 1)
            with open(os.path.join(folder, name)) as f:
                own, wall, batches, cpu = f.read().split()[:4]
            entry = out.setdefault(int(dataset), {"own_s": 0.0, "wall_s": 0.0, "cpu_s": 0.0, "batches": 0,
                                                  "workers": 0})
            entry["own_s"] += float(own)
            entry["cpu_s"] += float(cpu)
            entry["wall_s"] += float(wall)
            entry["batches"] += int(batches)
            entry["workers"] += 1
        except (OSError, ValueError):
            continue
    return out
