"""How much trace a step writes, and how many steps fit the trace budget.

One step before the window is sized: a light profiler (no stacks, no shapes) counts its events and
sys.settrace counts its Python calls. A budget too small for the steps asked for first costs steps
(warm-up, then measured steps, down to one of each). Where that would leave fewer than MIN_STEPS measured
steps, the stacks are recorded for the warm-up and the first measured step only, the later steps without
them (two profiler sessions merged into the one trace: parts.py), so the figures still rest on several steps.
Only when a single step with stacks does not fit are the Python stacks dropped (never silently: the report
says file:line is missing and how to get it back), unless the user keeps them (`--keep-stacks`)."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from ..emulation.cuda_shim import gpu_present

# bytes of uncompressed trace per recorded event (an op with its input shapes), and per Python call when
# stacks are recorded (its python_function event and those of the builtins it calls); measured on an
# op-heavy step (LSTMCell over 999 time steps: 131k events, 61 MB) and on the samples
BYTES_PER_EVENT = 420
BYTES_PER_PYTHON_CALL = 500
MARGIN = 0.8  # of the budget: the estimate is within about 10 %
MIN_STEPS = 3  # measured steps a figure should rest on (fewer: each finding says so)


def host_blocks(placement, config: dict) -> bool:
    """Whether the window records the CPU allocator's allocations and frees (profile_memory): on the emulated
    device they are the device's, and a projection takes out of the host's time what freeing them cost the
    CPU (a large block goes back to the OS) and costs a GPU's caching allocator nothing (projection/frees.py)."""
    return placement is not None and bool(config.get("record_shapes"))


@dataclass
class Fit:
    warmup: int
    steps: int
    with_stack: bool
    mb_per_step: float
    trimmed: dict = field(default_factory=dict)   # what was cut, for the report
    stacked_steps: int | None = None  # measured steps recorded with stacks when the later ones are not
    stacks_mb: float = 0.0  # what the steps with stacks add to the trace (mb_per_step is then a step's without)


def fit_budget(events: int, calls: int, budget_mb: float | None, warmup: int, steps: int, with_stack: bool,
               keep_stacks: bool = False) -> Fit:
    """The window that fits `budget_mb` of uncompressed trace, given one sized step."""
    stacks_mb = calls * BYTES_PER_PYTHON_CALL / 1e6
    events_mb = events * BYTES_PER_EVENT / 1e6
    per_step = events_mb + (stacks_mb if with_stack else 0.0)
    if not budget_mb or not (events or calls):
        return Fit(warmup, steps, with_stack, per_step)
    room = MARGIN * budget_mb
    trimmed: dict = {}
    fit = int(room // max(per_step, 1e-9))
    if with_stack and fit < 1 and not keep_stacks:  # not even one step with stacks: stacks go
        with_stack, per_step = False, events_mb
        trimmed["stacks"] = "off"
        fit = int(room // max(per_step, 1e-9))
    if fit < warmup + steps and with_stack and not keep_stacks and min(steps, MIN_STEPS) > max(fit - min(warmup, 1), 1):
        split = _stacks_on_the_first_step(room, warmup, steps, per_step, events_mb)
        if split is not None:
            if split != (warmup, steps):
                trimmed.update(warmup=split[0], steps=split[1])
            trimmed.update(stacked_steps=1, estimated_mb_per_step=round(per_step, 2))
            return Fit(*split, with_stack, events_mb, trimmed, stacked_steps=1, stacks_mb=(split[0] + 1) * stacks_mb)
    if fit < warmup + steps:
        new_steps = max(min(steps, fit), 1)
        new_warmup = min(warmup, max(fit - new_steps, 0))
        if new_warmup == 0 and warmup > 0 and new_steps > 1:  # one warm-up step is worth a measured one
            new_warmup, new_steps = 1, new_steps - 1
        warmup, steps = new_warmup, new_steps
        trimmed.update(warmup=warmup, steps=steps)
    trimmed["estimated_mb_per_step"] = round(per_step, 2)
    return Fit(warmup, steps, with_stack, per_step, trimmed)


def _stacks_on_the_first_step(room: float, warmup: int, steps: int, stacked_mb: float,
                              events_mb: float) -> tuple[int, int] | None:
    """(warm-up, measured steps) when the warm-up and the first measured step are recorded with stacks and the
    later steps without (parts.py): at least MIN_STEPS measured (or all asked for), as many as fit, one warm-up
    step (where the probes' hooks run, never in a measured step); None when even that does not fit."""
    w = min(warmup, 1)
    later = int((room - (w + 1) * stacked_mb) // max(events_mb, 1e-9))  # the steps without stacks that fit
    if later < 0 or 1 + later < min(steps, MIN_STEPS):
        return None
    return w, min(steps, 1 + later)


class Sizer:
    """Counts one step's profiler events (a light profiler) and Python calls (sys.settrace)."""

    def __init__(self, torch, own_profiler, profile_memory: bool = False):
        self.torch, self.own_profiler, self.calls = torch, own_profiler, 0
        self.prof: Any = None
        self.profile_memory = profile_memory  # the window records allocations: they are counted as events

    def _trace(self, frame, event, arg):
        self.calls += 1
        return None

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile
        self.calls = 0
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu_present() else [])
        try:
            self.prof = profile(activities=activities, profile_memory=self.profile_memory)
            self.own_profiler(self.prof)
            self.prof.start()
        except Exception:  # sizing is an optimisation: without it the window is recorded as asked
            self.prof = None
        sys.settrace(self._trace)

    def stop(self) -> tuple[int, int]:
        sys.settrace(None)
        events = 0
        if self.prof is not None:
            try:
                self.prof.stop()
                events = len(self.prof.profiler.kineto_results.events())
            except Exception:
                events = 0
            self.prof = None
        return events, self.calls
