"""How much trace a step writes, and how many steps fit the trace budget.

One step before the window is sized: a light profiler (no stacks, no shapes) counts its events and
sys.settrace counts its Python calls. The warm-up steps hold the probes (device memory, module order, FLOPs,
executed lines), whose own Python under stacks writes several times a plain step. Where the window with them
would pass the budget, the warm-up is recorded without stacks (no finding reads a warm-up step's lines; a
second profiler session starts with the measured steps: parts.py). A budget still too small costs steps
(warm-up, then measured steps, down to one of each); where that would leave fewer than MIN_STEPS measured
steps, the stacks are recorded for the first measured step only, the later steps without them, so the figures
still rest on several steps. Only when a single step with stacks does not fit are the Python stacks dropped
(never silently: the report says file:line is missing and how to get it back), unless the user keeps them
(`--keep-stacks`)."""
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
# the probes' Python calls per recorded event in each of the (at most) PROBED_STEPS warm-up steps they watch: a
# dispatch mode sees every op (device memory, FLOPs), module hooks every layer; 2 to 4.4 measured (an emulated
# CNN trainer, a Python-heavy one)
PROBE_CALLS_PER_EVENT = 5
PROBE_EVENTS = 0.5  # and their own ops: 40-50 % more events in those steps (python_heavy.py's warm-up)
PROBED_STEPS = 2


def host_blocks(placement, config: dict) -> bool:
    """Whether the window records the CPU allocator's allocations and frees (profile_memory): on the emulated
    device they are the device's, and a projection takes out of the host's time what freeing them cost the
    CPU (a large block goes back to the OS) and costs a GPU's caching allocator nothing (projection/host/frees.py)."""
    return placement is not None and bool(config.get("record_shapes"))


@dataclass
class Fit:
    warmup: int
    steps: int
    with_stack: bool
    mb_per_step: float  # a measured step as sized (with its stacks, where it has them)
    trimmed: dict = field(default_factory=dict)   # what was cut, for the report
    stacked_steps: int | None = None  # measured steps recorded with stacks when the later ones are not
    warmup_stacks: bool = True  # the warm-up recorded with stacks (in the measured steps' profiler session)
    events_mb: float = 0.0      # a step without stacks
    stacks_mb: float = 0.0      # what stacks add to a step (0 without them)
    warmup_mb: float = 0.0      # the whole warm-up, its probes' Python too where it has stacks


def fit_budget(events: int, calls: int, budget_mb: float | None, warmup: int, steps: int, with_stack: bool,
               keep_stacks: bool = False) -> Fit:
    """The window that fits `budget_mb` of uncompressed trace, given one sized step."""
    stacks_mb = calls * BYTES_PER_PYTHON_CALL / 1e6
    events_mb = events * BYTES_PER_EVENT / 1e6
    per_step = events_mb + (stacks_mb if with_stack else 0.0)

    def probes_mb(w: int, stacks: bool = True) -> float:  # what the probes add to `w` warm-up steps
        calls = PROBE_CALLS_PER_EVENT * events * BYTES_PER_PYTHON_CALL if stacks else 0.0
        return min(w, PROBED_STEPS) * (calls + PROBE_EVENTS * events * BYTES_PER_EVENT) / 1e6
    if not budget_mb or not (events or calls):
        fit = Fit(warmup, steps, with_stack, per_step)
    elif not with_stack or warmup == 0 or warmup * per_step + probes_mb(warmup) + steps * per_step <= MARGIN * budget_mb:
        fit = _fit(MARGIN * budget_mb, warmup, steps, with_stack, per_step, events_mb, keep_stacks)
    else:
        fit = _fit(MARGIN * budget_mb, warmup, steps, with_stack, per_step, events_mb, keep_stacks,
                   warmup_mb=events_mb + probes_mb(1, stacks=False))
        if fit.with_stack and fit.warmup > 0:
            fit.warmup_stacks = False
            fit.trimmed["warmup_stacks"] = "off"
    fit.events_mb, fit.stacks_mb = events_mb, (stacks_mb if fit.with_stack else 0.0)
    stacked = fit.warmup_stacks and fit.with_stack
    fit.warmup_mb = fit.warmup * (events_mb + (stacks_mb if stacked else 0.0)) + probes_mb(fit.warmup, stacked)
    return fit


def _fit(room: float, warmup: int, steps: int, with_stack: bool, per_step: float, events_mb: float,
         keep_stacks: bool, warmup_mb: float | None = None) -> Fit:
    """The steps that fit `room` MB, each `per_step` (`events_mb` without stacks), a warm-up step `warmup_mb`
    (as a measured one when None)."""
    trimmed: dict = {}
    warm = per_step if warmup_mb is None else warmup_mb

    def measured(w: int) -> int:  # the measured steps that fit after `w` warm-up steps, each with stacks
        return int(max(room - w * warm, 0.0) // max(per_step, 1e-9))
    if with_stack and measured(0) < 1 and not keep_stacks:  # not even one step with stacks
        with_stack, per_step, warm = False, events_mb, events_mb
        trimmed["stacks"] = "off"
    if measured(warmup) >= steps:
        trimmed["estimated_mb_per_step"] = round(per_step, 2)
        return Fit(warmup, steps, with_stack, per_step, trimmed)
    if with_stack and not keep_stacks and max(measured(min(warmup, 1)), 1) < min(steps, MIN_STEPS):
        split = _stacks_on_the_first_step(room, warmup, steps, per_step, events_mb, warm)
        if split is not None:
            if split != (warmup, steps):
                trimmed.update(warmup=split[0], steps=split[1])
            trimmed.update(stacked_steps=1, estimated_mb_per_step=round(per_step, 2))
            return Fit(*split, with_stack, per_step, trimmed, stacked_steps=1)
    new_steps = max(min(steps, measured(min(warmup, 1))), 1)  # measured steps first, then warm-up ones
    new_warmup = min(warmup, int(max(room - new_steps * per_step, 0.0) // max(warm, 1e-9)))
    if new_warmup == 0 and warmup > 0 and new_steps > 1:  # one warm-up step is worth a measured one
        new_warmup, new_steps = 1, new_steps - 1
    trimmed.update(warmup=new_warmup, steps=new_steps, estimated_mb_per_step=round(per_step, 2))
    return Fit(new_warmup, new_steps, with_stack, per_step, trimmed)


def _stacks_on_the_first_step(room: float, warmup: int, steps: int, stacked_mb: float,
                              events_mb: float, warm_mb: float) -> tuple[int, int] | None:
    """(warm-up, measured steps) when the first measured step is recorded with stacks and the later steps
    without (parts.py), each warm-up step `warm_mb`: at least MIN_STEPS measured (or all asked for), as many as
    fit, the warm-up asked for where it fits, else one (where the probes' hooks run, never in a measured step);
    None when even that does not fit."""
    for w in dict.fromkeys((warmup, min(warmup, 1))):
        later = int((room - w * warm_mb - stacked_mb) // max(events_mb, 1e-9))  # the steps without stacks that fit
        if later >= 0 and 1 + later >= min(steps, MIN_STEPS):
            return w, min(steps, 1 + later)
    return None


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
