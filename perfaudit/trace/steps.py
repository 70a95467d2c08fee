"""Find training steps in a trace: ProfilerStep#N, else optimizer steps, else DataLoader batches."""
from __future__ import annotations

import re

from .model import Step, Trace

_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_OPTIMIZER_STEP = "Optimizer.step#"
_DATALOADER_NEXT = re.compile(r"^enumerate\(DataLoader\)#.*__next__$")


def _profiler_steps(trace: Trace) -> list[Step]:
    seen: dict[int, Step] = {}
    for ev in trace.named(lambda name: _PROFILER_STEP.match(name) is not None):
        m = _PROFILER_STEP.match(ev.name)
        if m is not None and int(m.group(1)) not in seen:
            seen[int(m.group(1))] = Step(int(m.group(1)), ev.ts, ev.end)
    return sorted(seen.values(), key=lambda s: s.ts)


def _boundaries_to_steps(starts: list[float], first: float, last: float, close_at_end: bool) -> list[Step]:
    """Steps between consecutive boundaries; `close_at_end` means a boundary ends a step."""
    steps = []
    if close_at_end:
        prev = first
        for i, end in enumerate(starts):
            steps.append(Step(i, prev, end))
            prev = end
    else:
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else last
            steps.append(Step(i, start, end))
    return steps


_BACKWARD = "autograd::engine::evaluate_function"
BACKWARD_GAP_US = 5000.0  # backward ops closer than this belong to one backward pass


def _backward_ends(trace: Trace) -> list[float]:
    """The end of each backward pass: autograd's engine ops merged into passes."""
    spans = sorted((e.ts, e.end) for e in trace.named(lambda name: name.startswith(_BACKWARD)))
    ends: list[float] = []
    current = None
    for ts, end in spans:
        if current is not None and ts - current > BACKWARD_GAP_US:
            ends.append(current)
        current = end if current is None else max(current, end)
    if current is not None:
        ends.append(current)
    return ends


def _iterations(steps: list[Step]) -> list[Step]:
    """Steps found from iterations (no ProfilerStep): the partial segment before the first boundary (from
    the trace's start) is dropped, and leading iterations far longer than the median (cudnn autotuning,
    compiling, the first batch) are warm-up, kept out of the figures."""
    if len(steps) >= 3:
        steps = steps[1:]
        for i, step in enumerate(steps):
            step.number = i
    if len(steps) >= 3:
        median = sorted(s.dur for s in steps)[len(steps) // 2]
        for step in steps:
            if step.dur <= 2.0 * median:
                break
            step.warmup = True
    return steps


def segment_steps(trace: Trace) -> None:
    host = trace.host
    first = host[0].ts if host else 0.0   # sorted by start
    last = max((e.ts + e.dur for e in host), default=0.0)
    steps = _profiler_steps(trace)
    source = "ProfilerStep"
    if not steps:
        ends = sorted({e.end for e in trace.named(lambda name: name.startswith(_OPTIMIZER_STEP))})
        if len(ends) >= 2:
            steps, source = _boundaries_to_steps(ends, first, last, close_at_end=True), "optimizer"
    if not steps:
        starts = sorted({e.ts for e in trace.named(lambda name: _DATALOADER_NEXT.match(name) is not None)})
        if len(starts) >= 2:
            steps, source = _boundaries_to_steps(starts, first, last, close_at_end=False), "dataloader"
            steps = steps[:-1] if len(steps) >= 3 else steps  # the last runs to the trace's end: partial
    if not steps:
        ends = _backward_ends(trace)
        if len(ends) >= 2:
            steps, source = _boundaries_to_steps(ends, first, last, close_at_end=True), "backward"
    iterated = source != "ProfilerStep" and bool(steps)
    if not steps and (host or trace.device):
        begin = min([first] + [e.ts for e in trace.device[:1]])
        end = max([last] + [e.end for e in trace.device[-1:]])
        steps, source = [Step(0, begin, end)], "whole-trace"
    window = trace.probes.get("window")
    window = window if isinstance(window, dict) else {}
    warmup = window.get("warmup", 0) if isinstance(window.get("warmup", 0), int) else 0
    excluded = window.get("excluded_steps")
    excluded = excluded if isinstance(excluded, dict) else {}
    if iterated:
        steps = _iterations(steps)
    for step in steps:
        step.warmup = step.warmup or (source == "ProfilerStep" and step.number < warmup)
        why = excluded.get(str(step.number)) if source == "ProfilerStep" else None
        step.excluded = why if isinstance(why, str) else None
    if steps and all(s.warmup for s in steps):
        for step in steps:  # the run ended inside warm-up: analyse what there is
            step.warmup = False
    trace.steps, trace.step_source = steps, source
