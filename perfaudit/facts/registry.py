"""Named facts: measurements computed from the trace model and the live-process probes.

A fact is a function of the analysis context, registered under a dotted name that rule files use.
It returns a value (number, bool, string, list of Sites) or raises Missing with the reason the data
is absent, so that a rule needing it is reported as skipped instead of guessing.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

from ..source import SourceIndex
from ..trace.frames import FrameIndex
from ..trace.model import Event, Step, Trace


class Missing(Exception):
    """The data this fact needs is not in the trace or probes; the message says what is absent."""


@dataclass(frozen=True)
class FactSpec:
    name: str
    doc: str
    fn: Callable[["Context"], Any]
    needs: tuple[str, ...] = ()  # what `perfaudit run` must record for it: "stacks", "shapes"


FACTS: dict[str, FactSpec] = {}


def fact(name: str, doc: str, needs: tuple[str, ...] = ()):
    def register(fn):
        if name in FACTS:
            raise ValueError(f"fact {name} registered twice")
        FACTS[name] = FactSpec(name, doc, fn, needs)
        return fn
    return register


_PROBE_LISTS = ("optimizers", "dataloaders", "debug_apis", "empty_cache", "bias_before_norm", "data_parallel",
                "schedulers", "sync_debug")


def _sanitise_probes(probes) -> dict:
    """Keep the probe structure the facts expect: lists of dicts, an environment dict, flags."""
    if not isinstance(probes, dict):
        return {}
    out = {}
    for key, value in probes.items():
        if key in _PROBE_LISTS:
            if isinstance(value, list):
                out[key] = [v for v in value if isinstance(v, dict)]
        elif key == "environment":
            if isinstance(value, dict):
                out[key] = value
        else:
            out[key] = value
    return out


class Context:
    """One trace (and its probes) under analysis; facts are computed once, on first use."""

    def __init__(self, trace: Trace | None, probes: dict | None = None, source_roots: tuple[str, ...] = (),
                 job: list["Context"] | None = None):
        self.trace = trace
        self.job = job  # for a job-level context: the per-rank contexts
        meta = trace.probes if trace is not None else {}
        self.meta = meta
        self.probes = _sanitise_probes(probes if probes is not None else meta.get("probes"))
        embedded_roots = meta.get("source_roots")
        roots = tuple(r for r in (embedded_roots if isinstance(embedded_roots, list) else ()) if isinstance(r, str))
        roots += tuple(source_roots)
        self.source = SourceIndex(roots)
        self.frames = FrameIndex(trace, roots) if trace is not None else None
        self._values: dict[str, Any] = {}
        self._missing: dict[str, str] = {}

    def get(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        if name in self._missing:
            raise Missing(self._missing[name])
        spec = FACTS.get(name)
        if spec is None:
            raise KeyError(name)
        try:
            value = spec.fn(self)
        except Missing as exc:
            self._missing[name] = str(exc)
            raise
        except (TypeError, AttributeError, KeyError, ValueError, IndexError) as exc:
            # probe data embedded in a trace file is input like any other: malformed, it skips the
            # rules that need it (with the reason) instead of stopping the report
            self._missing[name] = f"malformed data for {name} ({type(exc).__name__}: {exc})"
            raise Missing(self._missing[name]) from exc
        self._values[name] = value
        return value

    # -- helpers shared by the fact modules --------------------------------------------------
    def need_trace(self) -> Trace:
        if self.trace is None:
            raise Missing("no trace was recorded")
        return self.trace

    @cached_property
    def steps(self) -> list[Step]:
        trace = self.need_trace()
        steps = trace.measured_steps
        if not steps:
            raise Missing("the trace holds no complete step")
        return steps

    @cached_property
    def _step_starts(self) -> list[float]:
        return [s.ts for s in self.steps]

    def step_of(self, ts: float) -> int | None:
        """Index into self.steps of the measured step containing ts, or None."""
        i = bisect_right(self._step_starts, ts) - 1
        if i >= 0 and ts <= self.steps[i].end:
            return i
        return None

    def within(self, events: list[Event], start: float, end: float) -> list[Event]:
        """Events (sorted by ts) starting inside [start, end]."""
        cache = self.__dict__.setdefault("_ts_cache", {})
        starts = cache.get(id(events))
        if starts is None:
            starts = cache[id(events)] = [e.ts for e in events]
        return events[bisect_left(starts, start):bisect_right(starts, end)]

    @property
    def step_ms(self) -> float:
        return sum(s.dur for s in self.steps) / len(self.steps) / 1000.0

    @property
    def is_gpu(self) -> bool:
        return self.trace is not None and self.trace.has_gpu
