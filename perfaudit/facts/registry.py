"""Named facts: measurements computed from the trace model and the live-process probes.

A fact is a function of the analysis context, registered under a dotted name that rule files use.
It returns a value (number, bool, string, list of Sites) or raises Missing with the reason the data
is absent, so that a rule needing it is reported as skipped instead of guessing.
"""
from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..probe_schema import checked_probes
from ..source import SourceIndex
from ..trace.frames import FrameIndex
from ..trace.model import Event, Step, Trace
from ..trace.nesting import by_thread


def quartile(values: list[float]) -> float:
    """The first quartile (25th percentile, linear interpolation) of a non-empty list."""
    ordered = sorted(values)
    pos = 0.25 * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


class Missing(Exception):
    """The data this fact needs is not in the trace or probes; the message says what is absent."""


def moved_checkout(meta: dict, source_roots) -> dict[str, str]:
    """A trace recorded in another checkout (a GPU machine's, a colleague's): the folder it ran in, mapped
    onto the local folder (one the caller trusts) that holds the same script at the same place below it, when
    the recorded path itself cannot be read here. {recorded folder: local folder}, or {}."""
    cwd, script = meta.get("cwd"), meta.get("script")
    if not isinstance(cwd, str) or not isinstance(script, str) or not os.path.isabs(cwd) or len(cwd) < 2:
        return {}
    try:
        rel = os.path.relpath(script, cwd)
        if rel.startswith("..") or os.path.isabs(rel):
            return {}
        trusted = [os.path.realpath(r) for r in source_roots if r]
        here = os.path.realpath(script)
        if os.path.isfile(here) and any(here.startswith(t.rstrip(os.sep) + os.sep) for t in trusted):
            return {}  # readable where it was recorded
        for root in trusted:
            if os.path.isfile(os.path.join(root, rel)):
                return {cwd.rstrip(os.sep): root}
    except (OSError, ValueError):  # a NUL byte, a path too long for this system
        return {}
    return {}


@dataclass(frozen=True)
class FactSpec:
    name: str
    doc: str
    fn: Callable[[Context], Any]
    needs: tuple[str, ...] = ()  # what `perfaudit run` must record for it: "stacks", "shapes"


FACTS: dict[str, FactSpec] = {}


def fact(name: str, doc: str, needs: tuple[str, ...] = ()):
    def register(fn):
        if name in FACTS:
            raise ValueError(f"fact {name} registered twice")
        FACTS[name] = FactSpec(name, doc, fn, needs)
        return fn
    return register


def strict_default() -> bool:
    """PERFAUDIT_STRICT=1 (the test suite sets it): a bug in a fact raises instead of skipping rules."""
    return os.environ.get("PERFAUDIT_STRICT", "") not in ("", "0")


class Context:
    """One trace (and its probes) under analysis; facts are computed once, on first use."""

    def __init__(self, trace: Trace | None, probes: dict | None = None, source_roots: tuple[str, ...] = (),
                 job: list[dict] | None = None, strict: bool | None = None, target: str | None = None):
        self.trace = trace
        self.target = target or "auto"  # the GPU to project onto: a name, "auto" or "none" (facts.gpu.projection)
        self.job = job  # for a job-level context: each rank's figures (facts.ranks.rank_stats)
        self.strict = strict_default() if strict is None else strict
        meta = trace.probes if trace is not None else {}
        self.meta = meta
        self.probes, self.malformed_probes = checked_probes(probes if probes is not None else meta.get("probes"))
        self.errors: list[str] = []  # facts that failed with a bug (non-strict mode): said in the report
        embedded_roots = meta.get("source_roots")
        roots = tuple(r for r in (embedded_roots if isinstance(embedded_roots, list) else ()) if isinstance(r, str))
        roots += tuple(source_roots)
        embedded_aliases = meta.get("path_aliases")
        aliases = {k: v for k, v in (embedded_aliases if isinstance(embedded_aliases, dict) else {}).items()
                   if isinstance(k, str) and isinstance(v, str)}
        aliases.update(moved_checkout(meta, source_roots))
        roots += tuple(sorted(set(aliases) | {os.path.dirname(a) for a in aliases}))  # frames carry alias paths
        # only the roots the caller gives are trusted for reading files (a trace's own claims are not)
        trusted = tuple(source_roots) + tuple(v for v in aliases.values() if any(
            os.path.realpath(v).startswith(os.path.realpath(r)) for r in source_roots if r))
        self.source = SourceIndex(roots, aliases, self.probes.get("executed_lines"), trusted)
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
        except Exception as exc:
            # only data from outside may be missing, and it is checked where it comes in (the trace
            # parser, checked_probes): anything else is a bug in perfaudit, never "data missing"
            if self.strict:
                raise
            self._missing[name] = (f"internal error in fact {name} ({type(exc).__name__}: {exc}); "
                                   "a bug in perfaudit, please report it")
            self.errors.append(self._missing[name])
            raise Missing(self._missing[name]) from exc
        self._values[name] = value
        return value

    def probe(self, key: str):
        """A part of the live-process snapshot, or Missing with the reason it is absent."""
        if key in self.probes:
            return self.probes[key]
        if key in self.malformed_probes:
            raise Missing(f"the embedded probe data for '{key}' is malformed")
        raise Missing("no live-process probes (seen only by `perfaudit run`)")

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

    @cached_property
    def steps_without_stacks(self) -> frozenset[int]:
        """Measured steps (indices into self.steps) without a Python event, in a trace that has some."""
        python = self.trace.python if self.trace is not None else []
        if not python:
            return frozenset()
        starts = [e.ts for e in python]
        return frozenset(i for i, s in enumerate(self.steps) if bisect_left(starts, s.end) == bisect_left(starts, s.ts))

    @cached_property
    def unstacked_steps(self) -> frozenset[int]:
        """Measured steps recorded without Python stacks in a trace whose other measured steps have them (the
        trace budget kept stacks for the first step only): their evidence has no line of its own, and the sites
        count over the steps with stacks (Site.over_steps). Empty when no measured step has stacks."""
        without = self.steps_without_stacks
        return without if len(without) < len(self.steps) else frozenset()

    @cached_property
    def site_steps(self) -> list[Step]:
        """The steps a finding's lines come from (sites.py): the measured steps, less those without Python stacks
        when others have them; when no measured step has stacks but a recorded step left out only for waiting
        for a CPU does (the trace budget kept stacks for the first measured step, and a busy machine left it
        out), those: what a step does, its lines and their counts, is not the load's."""
        if self.unstacked_steps:
            return [s for i, s in enumerate(self.steps) if i not in self.unstacked_steps]
        if self.steps and len(self.steps_without_stacks) == len(self.steps):
            starts = [e.ts for e in self.need_trace().python]
            stacked = [s for s in self.load_independent_steps
                       if bisect_left(starts, s.end) > bisect_left(starts, s.ts)]
            if stacked:
                return stacked
        return self.steps

    def site_step_of(self, ts: float) -> int | None:
        """Index into self.site_steps of the step containing ts, or None."""
        steps = self.site_steps
        if steps is self.steps:
            return self.step_of(ts)
        i = bisect_right([s.ts for s in steps], ts) - 1
        return i if i >= 0 and ts <= steps[i].end else None

    def step_of(self, ts: float) -> int | None:
        """Index into self.steps of the measured step containing ts, or None."""
        i = bisect_right(self._step_starts, ts) - 1
        if i >= 0 and ts <= self.steps[i].end:
            return i
        return None

    def overlapping(self, events: list[Event], start: float, end: float) -> list[Event]:
        """Events (sorted by ts) that overlap [start, end]: a bisect, not a scan of the whole list (a
        step at a time over a gigabyte trace)."""
        cache = self.__dict__.setdefault("_overlap_cache", {})
        index = cache.get(id(events))
        if index is None or index[0] is not events:  # the list itself is kept: its id stays its own
            index = cache[id(events)] = (events, [e.ts for e in events], max((e.dur for e in events), default=0.0))
        _, starts, longest = index
        return [e for e in events[bisect_left(starts, start - longest):bisect_left(starts, end)] if e.end > start]

    def host_of(self, kind: str) -> list[Event]:
        """The host events of one kind ("op", "runtime", "annotation" …), in trace order: split in one
        pass over the host events, once, instead of a scan of all of them per fact."""
        split = self.__dict__.get("_host_by_kind")
        if split is None:
            split = {}
            for ev in self.need_trace().host:
                bucket = split.get(ev.kind)
                if bucket is None:
                    bucket = split[ev.kind] = []
                bucket.append(ev)
            self.__dict__["_host_by_kind"] = split
        return split.get(kind, [])

    def by_thread(self, events: list[Event]) -> dict:
        """Events grouped by thread for a nesting sweep (trace.nesting), kept for the next fact that
        sweeps the same list (the host ops: every runtime call's owner is looked up in them)."""
        cache = self.__dict__.setdefault("_by_thread", {})
        hit = cache.get(id(events))
        if hit is None or hit[0] is not events:
            hit = cache[id(events)] = (events, by_thread(events))
        return hit[1]

    def within(self, events: list[Event], start: float, end: float) -> list[Event]:
        """Events (sorted by ts) starting inside [start, end]."""
        cache = self.__dict__.setdefault("_ts_cache", {})
        hit = cache.get(id(events))
        if hit is None or hit[0] is not events:  # the list itself is kept: its id stays its own
            hit = cache[id(events)] = (events, [e.ts for e in events])
        starts = hit[1]
        return events[bisect_left(starts, start):bisect_right(starts, end)]

    @property
    def step_ms(self) -> float:
        """The step time every share is of: the mean measured step; on a busy machine (fewer undisturbed
        steps than asked for), the undisturbed step time: the first quartile over every recorded step of
        its duration less its measured wait for a CPU (a step other processes delayed is only ever longer,
        never shorter)."""
        quiet = self.quiet_steps
        if quiet:
            return quartile([self.undisturbed_us(s) for s in quiet]) / 1000.0
        return sum(s.dur for s in self.steps) / len(self.steps) / 1000.0

    def undisturbed_us(self, step: Step) -> float:
        """A step's duration less the time it waited for a CPU held by other processes (the recording
        measured that wait per step; a foreign trace did not: its duration as recorded)."""
        waited = self._waited_ms
        if 0 <= step.number < len(waited):
            return max(step.dur - 1000.0 * waited[step.number], 0.5 * step.dur)
        return step.dur

    def fetch_waited_us(self, step: Step) -> float | None:
        """Of a step's wait for a CPU, what its DataLoader fetches in the training process waited (the recording
        measured it per step since it did; None where it did not: then the wait is shared out by length)."""
        return self._part_waited_us("step_fetch_waited_ms", step)

    def host_waited_us(self, step: Step) -> tuple[float | None, float | None]:
        """(the training thread's own wait for a CPU, its fetches' wait) in a step, µs, each None where the
        recording did not measure it: the step's wait sums every thread's (an intra-op pool's too), while the
        host's Python, launches and fetches run on the training thread. Whoever held the CPU: the script's own
        DataLoader workers on a small machine too (older recordings kept only other processes' part)."""
        return self._part_waited_us("step_thread_waited_ms", step), self.fetch_waited_us(step)

    def _part_waited_us(self, key: str, step: Step) -> float | None:
        waited = self._window_waits(key)
        if 0 <= step.number < len(waited) and len(waited) == len(self._waited_ms):
            return 1000.0 * waited[step.number]
        return None

    @cached_property
    def _waited_ms(self) -> list[float]:
        return self._window_waits("step_waited_ms")

    def _window_waits(self, key: str) -> list[float]:
        if self.trace is None or self.trace.step_source != "ProfilerStep":  # numbered as the recording's steps
            return []
        window = self.trace.probes.get("window")
        waited = window.get(key) if isinstance(window, dict) else None
        if not isinstance(waited, list) or not all(isinstance(w, (int, float)) and not isinstance(w, bool)
                                                   and 0 <= w < float("inf") for w in waited):
            return []  # a trace's own figures, read as hostile: NaN, infinite or negative waits are no waits
        return [float(w) for w in waited]

    @cached_property
    def quiet_steps(self) -> list[Step] | None:
        """On a busy machine, the steps the undisturbed estimates are taken over: every recorded step
        that is not warm-up and was left out (if at all) only for waiting for a CPU; else None."""
        trace = self.trace
        window = trace.probes.get("window") if trace is not None else None
        if not isinstance(window, dict) or not window.get("busy_steps_measured"):
            return None
        steps = self.load_independent_steps
        return steps if len(steps) >= 4 else None

    @cached_property
    def load_independent_steps(self) -> list[Step]:
        """The recorded steps that are not warm-up and were left out (if at all) only for waiting for a CPU:
        what a step does (its ops, their shapes) does not depend on how busy the machine was, so a figure
        of content, not of time, is taken over all of them."""
        trace = self.need_trace()
        steps = [s for s in trace.steps if not s.warmup and (not s.excluded or s.excluded.startswith("it waited"))]
        return steps or self.steps

    @property
    def is_gpu(self) -> bool:
        return self.trace is not None and self.trace.has_gpu
