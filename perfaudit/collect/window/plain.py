"""The script's steps timed after the window, with no profiler recording them: what a step and its DataLoader
fetches take without perfaudit's recording, whose cost per Python call and per op inflates whatever runs in the
training process (a Dataset's `__getitem__` and collate, the Python between ops). Written to result.json once
timed (the trace is written before them); the report reads them from there (facts/data.py)."""
from __future__ import annotations

import time

from ..clock import disturbed, others_share, own_cpu, run_queue_wait_s, thread_wait_s, usable_cpus, waits_since

PLAIN_STEPS = 5   # timed after the window (`diff` needs 3 a side a busy machine left alone, as `verify` counts them)
FEWEST_PLAIN_STEPS = 3  # where steps are long, down to this many: the plain steps take PLAIN_TIME_S at most beyond
PLAIN_TIME_S = 2.5
PLAIN_MAX_STEP_S = 2.0  # none after a window of longer steps (the run would go on that long for them)
# steps run first and kept apart: the first step after the trace's export ran its fetch 1.0-2.1x slower than the
# steps after it (dataset_transforms.py, 5 runs: 2.5-5.2 ms against 2.0-2.7), on what the export left behind
SETTLING_STEPS = 1


class PlainSteps:
    """Opened at the window's end, then told of each step boundary (`next`) until `wanted` steps were timed after
    the settling ones (kept, marked `settling`)."""

    def __init__(self, probes, wanted: int):
        self.probes, self.wanted = probes, wanted  # probes: the DataLoader fetches' clock (loader.py)
        self.steps: list[dict] = []
        self.timing = False
        self._open: tuple | None = None
        self._cpus = usable_cpus()

    @property
    def runs(self) -> int:
        """The steps the script goes on for: the settling ones and those timed."""
        return self.wanted + SETTLING_STEPS if self.wanted > 0 else 0

    def start(self, step_s: float) -> None:
        """`step_s`: the window's typical step (s), which sets how many steps are timed."""
        if self.wanted > FEWEST_PLAIN_STEPS and step_s > 0:
            self.wanted = max(min(self.wanted, int(PLAIN_TIME_S / step_s)), FEWEST_PLAIN_STEPS)
        self.timing = self.wanted > 0
        if self.timing:
            self.probes.wait_clock = thread_wait_s  # each fetch's own wait for a CPU (it runs on the training thread)
            self._mark()

    def next(self) -> bool:
        """At a step boundary: the step since the last one timed; False once enough steps were."""
        if not self.timing or self._open is None:
            return False
        t0, fetch0, fetch_wait0, wait0, cpu0 = self._open
        wall = time.perf_counter() - t0
        _, others, wait, cpu = waits_since(wait0, cpu0, wall, self._cpus)
        fetch_waited = max(self.probes.fetch_wait_s - fetch_wait0, 0.0) if others > 0 else 0.0
        self.steps.append({"wall_ms": round(wall * 1e3, 4), "fetch_ms": round((self.probes.fetch_s - fetch0) * 1e3, 4),
                           "waited_ms": round(others * 1e3, 4), "fetch_waited_ms": round(fetch_waited * 1e3, 4),
                           "disturbed": disturbed(others, wall)})
        if len(self.steps) <= SETTLING_STEPS:
            self.steps[-1]["settling"] = True
        if len(self.steps) >= self.runs:
            self.stop()
            return False
        self._mark(wait, cpu)  # this step's end is the next one's start: the clocks are read once between them
        return True

    def stop(self) -> None:
        self.timing, self._open, self.probes.wait_clock = False, None, None

    def _mark(self, wait: float | None = None, cpu: tuple[float, float] | None = None) -> None:
        if cpu is None:
            wait, cpu = run_queue_wait_s(), own_cpu()  # read before the step's clock starts: not in its wall
            others_share(cpu[0], wanted=False)
        self._open = (time.perf_counter(), self.probes.fetch_s, self.probes.fetch_wait_s, wait, cpu)

    def summary(self) -> list[dict]:
        return list(self.steps)
