"""perfaudit's own cost in a recorded step, to take out of the host's time before projecting it, measured in
the run itself (collect/probes/host_overhead.py): what the tracer adds per recorded Python call (a loop of Python
calls timed bare and inside `perfaudit#calibration:python`) and per recorded op (a loop of tiny torch calls,
inside `perfaudit#calibration`, less its Python calls), times the calls and ops of a stretch; on an emulated
CUDA run, the device mode's own time around each torch call, as recorded; and perfaudit's hooks and probes."""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from math import isfinite
from operator import attrgetter

from ...trace.model import Event, Step, Trace

CALIBRATION = "perfaudit#calibration"
PYTHON_CALIBRATION = "perfaudit#calibration:python"
_TS = attrgetter("ts")


def _number(record: dict, key: str) -> float | None:
    v = record.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not isfinite(v) or v < 0:
        return None
    return float(v)


@dataclass(frozen=True)
class EventCosts:
    python_us: float   # a recorded Python call
    op_us: float       # a recorded op (with its shapes)


def event_costs(trace: Trace) -> EventCosts | None:
    """What perfaudit adds per recorded Python call and per recorded op on this machine, under this load; None
    for a trace without the calibration (recorded elsewhere, or by an older perfaudit). A trace with only the
    torch loop's calibration (an older perfaudit) gives one cost for every event."""
    probes = trace.probes.get("probes")
    record = probes.get("host_overhead") if isinstance(probes, dict) else None
    if not isinstance(record, dict):
        return None
    bare, instrumented = _number(record, "bare_s"), _number(record, "instrumented_s")
    names = trace.names()
    ranges = names.get(CALIBRATION) or []
    rounds = record.get("rounds", 1)  # each loop ran this many times; the times are of the quickest round
    if not ranges or bare is None or instrumented is None:
        return None
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= 1000:
        return None
    r = ranges[0]
    calls, ops = (_count(trace.python, r.ts, r.end) / rounds,
                  sum(1 for e in trace.host[bisect_left(trace.host, r.ts, key=_TS):bisect_left(trace.host, r.end, key=_TS)]
                      if e.kind == "op") / rounds)
    extra = max(instrumented - bare, 0.0) * 1e6
    if calls + ops <= 0:
        return EventCosts(0.0, 0.0)
    python_us = _python_us(trace, record, names.get(PYTHON_CALIBRATION) or [], rounds)
    if python_us is None or ops <= 0:
        each = extra / (calls + ops)
        return EventCosts(each, each)
    mode = _mode_us(trace, r.ts, r.end) / rounds   # the emulated device's mode: measured apart, in every stretch
    return EventCosts(python_us, max(extra - mode - python_us * calls, 0.0) / ops)


def _python_us(trace: Trace, record: dict, ranges: list[Event], rounds: int) -> float | None:
    bare, instrumented = _number(record, "python_bare_s"), _number(record, "python_instrumented_s")
    if not ranges or bare is None or instrumented is None:
        return None
    r = ranges[0]
    calls = _count(trace.python, r.ts, r.end) / rounds
    return max(instrumented - bare, 0.0) * 1e6 / calls if calls > 0 else None


def _count(events: list[Event], start: float, end: float) -> int:
    return bisect_left(events, end, key=_TS) - bisect_left(events, start, key=_TS)


def _mode_selves(trace: Trace, start: float, end: float) -> list[tuple[float, float]]:
    """(start, own time) of each outermost frame of the emulated device's mode that starts in [start, end): the
    frame less the script's calls and ops inside it (the torch call it serves)."""
    spans = trace.emulation_frames
    out = []
    for a, b in spans[bisect_left(spans, (start,)):bisect_left(spans, (end,))]:
        inside = trace.python[bisect_left(trace.python, a, key=_TS):bisect_left(trace.python, b, key=_TS)]
        inside += [e for e in trace.host[bisect_left(trace.host, a, key=_TS):bisect_left(trace.host, b, key=_TS)]
                   if e.kind == "op"]
        inside.sort(key=lambda e: (e.ts, -e.dur))
        inner, reach = 0.0, a
        for ev in inside:
            if ev.ts >= reach:
                inner += min(ev.end, b) - ev.ts
                reach = ev.end
        out.append((a, max(b - a - inner, 0.0)))
    return out


def _mode_us(trace: Trace, start: float, end: float) -> float:
    return sum(own for _, own in _mode_selves(trace, start, end))


def own_python_us(trace: Trace, costs: EventCosts, start: float, end: float) -> float:
    """What perfaudit added to the Python of a stretch: its recorded calls times what recording one costs, and the
    device mode's own time there (µs)."""
    return costs.python_us * _count(trace.python, start, end) + _mode_us(trace, start, end)


OWN_FRAMES = "perfaudit/collect/"   # perfaudit's hooks and probes, as the Python tracer names their files


class OwnCost:
    """perfaudit's cost in a stretch of recorded host time (µs): its calls and ops times what recording each
    costs, the device mode's own time, and the whole time of perfaudit's own frames that ran none of the
    script's work (its step hooks and probes: no op and no DataLoader fetch inside)."""

    def __init__(self, trace: Trace, costs: EventCosts):
        self.costs, self.trace, self.python = costs, trace, trace.python
        self.ops: list[Event] = []
        self.frames: list[tuple[float, float]] = []
        self.frame_starts: list[float] = []
        self._mode_starts: list[float] = []
        self._mode_sums = [0.0]

    def prepare(self, start: float, end: float, fetch_starts: list[float]) -> None:
        """Before the queries below, over the steps replayed (`start` to `end`, the trace's DataLoader fetches
        starting at `fetch_starts`): their ops, perfaudit's own frames, and the device mode's own time in each
        of its frames, summed once."""
        host = self.trace.host[bisect_left(self.trace.host, start, key=_TS):bisect_left(self.trace.host, end, key=_TS)]
        self.ops = [e for e in host if e.kind == "op"]
        python = self.python[bisect_left(self.python, start, key=_TS):bisect_left(self.python, end, key=_TS)]
        self.frames = _own_frames(python, [e.ts for e in self.ops], fetch_starts)
        self.frame_starts = [a for a, _ in self.frames]
        selves = _mode_selves(self.trace, start, end)
        self._mode_starts = [a for a, _ in selves]
        self._mode_sums = [0.0]
        for _, own in selves:
            self._mode_sums.append(self._mode_sums[-1] + own)

    def _mode(self, start: float, end: float) -> float:
        i, j = bisect_left(self._mode_starts, start), bisect_left(self._mode_starts, end)
        return self._mode_sums[j] - self._mode_sums[i]

    def between(self, start: float, end: float) -> float:
        """In a stretch whose whole measured time is kept (a DataLoader fetch in the main process): every Python
        call and op recorded in it, and the device mode's own time there."""
        return (self.costs.python_us * _count(self.python, start, end) + self.costs.op_us * _count(self.ops, start, end)
                + self._mode(start, end))

    def timed(self, start: float, end: float) -> float:
        """In a Python gap between two root ops (outside any fetch): the time of perfaudit's own frames starting
        in it, and the device mode's own time outside them (prepare() first)."""
        i, j = bisect_left(self.frame_starts, start), bisect_left(self.frame_starts, end)
        frames = [(a, min(b, end)) for a, b in self.frames[i:j]]
        return max(self._mode(start, end) - sum(self._mode(a, b) for a, b in frames), 0.0) + sum(b - a for a, b in frames)

    def in_gaps(self, step: Step, roots: list[Event], fetches: list[tuple[float, float]]) -> tuple[float, float]:
        """In a step's time outside its root ops and its fetches: what was counted (the Python calls the tracer
        recorded, the root ops' entry and exit: what an op costs inside it, the projection replaces anyway), and
        what was timed (the device mode's own time around the script's torch calls, prepare() first, and
        perfaudit's own frames there: one the scheduler preempted holds the wait too, see plan())."""
        starts = [r.ts for r in roots]

        def placed(a: float, b: float) -> bool:  # not inside an op (modelled), not beside a fetch (the fetch's own)
            i = bisect_left(starts, a)
            return not (i and roots[i - 1].end > a) and not any(f0 < b and a < f1 for f0, f1 in fetches)
        frames = [(a, min(b, step.end)) for a, b in
                  self.frames[bisect_left(self.frame_starts, step.ts):bisect_left(self.frame_starts, step.end)]
                  if placed(a, b)]
        calls = _count(self.python, step.ts, step.end) - sum(_count(self.python, a, b) for a, b in fetches + frames)
        mode = self._mode(step.ts, step.end) - sum(self._mode(a, b) for a, b in fetches + frames)  # timed once
        return (self.costs.python_us * max(calls, 0) + self.costs.op_us * len(roots),
                max(mode, 0.0) + sum(b - a for a, b in frames))


def _own_frames(python: list[Event], ops: list[float], fetch_starts: list[float]) -> list[tuple[float, float]]:
    """perfaudit's outermost frames among `python` that hold none of the script's work: no op and no DataLoader
    fetch starts inside them. Sorted by start."""
    frames: list[tuple[float, float]] = []
    for ev in python:  # sorted by start, the enclosing first
        if not ev.name.startswith(OWN_FRAMES) or (frames and ev.ts < frames[-1][1]):
            continue
        if any(bisect_left(starts, ev.end) > bisect_left(starts, ev.ts) for starts in (ops, fetch_starts)):
            continue
        frames.append((ev.ts, ev.end))
    return frames


def in_python_time(trace: Trace) -> OwnCost | None:
    """perfaudit's cost in the trace's host time, or None when the trace has no calibration."""
    costs = event_costs(trace)
    return None if costs is None else OwnCost(trace, costs)
