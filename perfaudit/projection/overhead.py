"""perfaudit's own cost in a recorded step, to take out of the host's time before projecting it: the cost
per recorded event measured in the run itself (collect/probes/host_overhead.py: a loop of tiny torch calls timed
bare and inside the trace's `perfaudit#calibration` range), times the events each step recorded."""
from __future__ import annotations

from bisect import bisect_left
from math import isfinite
from operator import attrgetter

from ..trace.model import Step, Trace

CALIBRATION = "perfaudit#calibration"
_TS = attrgetter("ts")


def us_per_event(trace: Trace) -> float | None:
    """µs perfaudit adds per recorded event (op or Python call) on this machine, under this load; None for a
    trace without the calibration (recorded elsewhere, or by an older perfaudit)."""
    probes = trace.probes.get("probes")
    record = probes.get("host_overhead") if isinstance(probes, dict) else None
    if not isinstance(record, dict):
        return None
    bare, instrumented = record.get("bare_s"), record.get("instrumented_s")
    ranges = trace.names().get(CALIBRATION) or []
    if not ranges or not isinstance(bare, (int, float)) or not isinstance(instrumented, (int, float)):
        return None
    if not all(not isinstance(v, bool) and isfinite(v) and v >= 0 for v in (bare, instrumented)):
        return None
    rounds = record.get("rounds", 1)  # the loop ran this many times; the times are of the quickest round
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= 1000:
        return None
    r = ranges[0]
    events = _count(trace, r.ts, r.end) / rounds
    if events <= 0 or instrumented <= bare:
        return 0.0
    return (instrumented - bare) * 1e6 / events


def _count(trace: Trace, start: float, end: float) -> int:
    return sum(bisect_left(events, end, key=_TS) - bisect_left(events, start, key=_TS)
               for events in (trace.host, trace.python))


def per_step_us(trace: Trace, steps: list[Step]) -> list[float] | None:
    """perfaudit's cost in each step (µs, every event it recorded), or None when the trace does not say."""
    per_event = us_per_event(trace)
    if per_event is None:
        return None
    return [per_event * _count(trace, s.ts, s.end) for s in steps]


def in_python_time(trace: Trace):
    """(step, root ops) -> perfaudit's cost in the step's Python time between ops (µs): the Python calls
    the tracer recorded and the outermost ops' entry and exit (what an op costs inside it, the projection
    replaces anyway); None when the trace has no calibration."""
    per_event = us_per_event(trace)
    if per_event is None:
        return None
    python = trace.python

    def cost(step: Step, roots: int) -> float:
        calls = bisect_left(python, step.end, key=_TS) - bisect_left(python, step.ts, key=_TS)
        return per_event * (calls + roots)
    return cost
