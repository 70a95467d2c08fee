"""perfaudit's own cost in a recorded step, to take out of the host's time before projecting it: the cost
per recorded event measured in the run itself (collect/host_overhead.py: a loop of tiny torch calls timed
bare and inside the trace's `perfaudit#calibration` range), times the events each step recorded."""
from __future__ import annotations

from bisect import bisect_left

from ..trace.model import Step, Trace

CALIBRATION = "perfaudit#calibration"


def us_per_event(trace: Trace) -> float | None:
    """µs perfaudit adds per recorded event (op or Python call) on this machine, under this load; None for a
    trace without the calibration (recorded elsewhere, or by an older perfaudit)."""
    probes = trace.probes.get("probes")
    record = probes.get("host_overhead") if isinstance(probes, dict) else None
    if not isinstance(record, dict):
        return None
    bare, instrumented = record.get("bare_s"), record.get("instrumented_s")
    ranges = [e for e in trace.host if e.name == CALIBRATION]
    if not isinstance(bare, (int, float)) or not isinstance(instrumented, (int, float)) or not ranges:
        return None
    r = ranges[0]
    events = _count(trace, r.ts, r.end)
    if events <= 0 or instrumented <= bare:
        return 0.0
    return (instrumented - bare) * 1e6 / events


def _count(trace: Trace, start: float, end: float) -> int:
    n = 0
    for events in (trace.host, trace.python):
        starts = _starts(trace, events)
        n += bisect_left(starts, end) - bisect_left(starts, start)
    return n


def _starts(trace: Trace, events: list) -> list[float]:
    cache = trace.__dict__.setdefault("_projection_starts", {})
    hit = cache.get(id(events))
    if hit is None or hit[0] is not events:
        hit = cache[id(events)] = (events, [e.ts for e in events])
    return hit[1]


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
    starts = _starts(trace, trace.python)

    def cost(step: Step, roots: int) -> float:
        calls = bisect_left(starts, step.end) - bisect_left(starts, step.ts)
        return per_event * (calls + roots)
    return cost
