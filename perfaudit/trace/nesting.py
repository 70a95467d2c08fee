"""Which events enclose which: one sorted sweep per thread with a stack of open intervals."""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterator
from operator import attrgetter

from .model import Event


def by_thread(events: list[Event]) -> dict[tuple, list[Event]]:
    """The events grouped by (pid, tid), in their order: what a sweep walks. A caller that sweeps the
    same containers again (facts.Context.by_thread) keeps it and passes it back."""
    grouped: dict[tuple, list[Event]] = defaultdict(list)
    for ev in events:
        grouped[(ev.pid, ev.tid)].append(ev)
    return grouped


def enclosing(containers: list[Event], queries: list[Event], grouped_containers: dict | None = None,
              nesting: Nesting | None = None) -> Iterator[tuple[Event, list[Event]]]:
    """For each query, the containers on its thread that enclose its start, outermost first.

    `containers` must be sorted by (ts, -dur), as the parser leaves them; host events nest properly
    within a thread. `nesting`: the containers' Nesting, made once by a caller that asks again (a trace's
    Python frames: every fact that attributes ops to the user's lines asks).
    """
    nesting = nesting or Nesting(grouped_containers if grouped_containers is not None else by_thread(containers))
    for qs in by_thread(queries).values():  # thread by thread, each in time order, as callers have read them
        qs.sort(key=_START)
        for q in qs:
            yield q, nesting.stack_at(q)


class Nesting:
    """Each thread's containers with the innermost earlier one still open when each started (its parent),
    from one sweep with a stack of open intervals: the stack enclosing any instant is then a walk up the
    parents from the last container started by then, without sweeping the thread again."""

    def __init__(self, grouped_containers: dict[tuple, list[Event]]):
        self._threads: dict[tuple, tuple[list[Event], list[float], list[int]]] = {}
        for key, outer in grouped_containers.items():
            starts = [e.ts for e in outer]
            ends = [e.ts + e.dur for e in outer]
            parents = [-1] * len(outer)
            stack: list[int] = []
            for i, start in enumerate(starts):
                while stack and ends[stack[-1]] < start:
                    stack.pop()
                if stack:
                    parents[i] = stack[-1]
                stack.append(i)
            self._threads[key] = (outer, starts, parents)

    def stack_at(self, q: Event) -> list[Event]:
        """The containers on q's thread open at q's start (q itself left out), outermost first: those the
        sweep of `enclosing` holds there (pops only from the top, as it does)."""
        return self.chain(self.open_at(q), q)

    def open_at(self, q: Event) -> tuple[tuple, int] | None:
        """(q's thread, the index of the innermost container open at q's start) or None: what its stack
        follows from, shared by every query that starts inside the same innermost container."""
        thread = self._threads.get((q.pid, q.tid))
        if thread is None:
            return None
        outer, starts, parents = thread
        i = bisect_right(starts, q.ts) - 1
        ts = q.ts
        while i >= 0 and outer[i].ts + outer[i].dur < ts:  # closed before q started: off the stack's top
            i = parents[i]
        return ((q.pid, q.tid), i) if i >= 0 else None

    def chain(self, where: tuple[tuple, int] | None, q: Event | None = None) -> list[Event]:
        """The container at `where` (open_at's) and those around it, outermost first, q left out."""
        if where is None:
            return []
        outer, _, parents = self._threads[where[0]]
        i = where[1]
        chain: list[Event] = []
        while i >= 0:
            e = outer[i]
            if e is not q:
                chain.append(e)
            i = parents[i]
        chain.reverse()
        return chain


def innermost(containers: list[Event], queries: list[Event], grouped_containers: dict | None = None
              ) -> dict[int, Event]:
    """id(query) -> the innermost container enclosing it (queries without one are left out): the sweep
    of `enclosing`, inlined (it runs over every runtime call of a trace). With far fewer containers than
    queries (the launches inside a few hundred ops), only the queries inside one are swept."""
    out: dict[int, Event] = {}
    if not containers or not queries:
        return out
    threads = grouped_containers if grouped_containers is not None else by_thread(containers)
    grouped: dict[tuple, list[Event]] = defaultdict(list)
    for q in queries:
        grouped[(q.pid, q.tid)].append(q)
    for key, qs in grouped.items():
        outer = threads.get(key) or []
        n = len(outer)
        if not n:
            continue
        qs.sort(key=_START)
        if n * 4 < len(qs):
            qs = _inside_any(list(outer), qs)
        stack: list[Event] = []
        i = 0
        for q in qs:
            ts = q.ts
            while i < n and outer[i].ts <= ts:
                e = outer[i]
                i += 1
                start = e.ts
                while stack and stack[-1].ts + stack[-1].dur < start:
                    stack.pop()
                stack.append(e)
            while stack and stack[-1].ts + stack[-1].dur < ts:
                stack.pop()
            end = ts + q.dur
            for ev in reversed(stack):
                if ev is not q and ev.ts + ev.dur >= end:
                    out[id(q)] = ev
                    break
    return out


_START = attrgetter("ts")


def _inside_any(containers: list[Event], queries: list[Event]) -> list[Event]:
    """The queries (sorted by start) that start inside at least one of the containers."""
    starts = [q.ts for q in queries]
    picked: list[Event] = []
    done = 0
    spans = sorted((c.ts, c.ts + c.dur) for c in containers)
    lo, hi = spans[0]
    for start, end in [*spans[1:], (float("inf"), float("inf"))]:
        if start <= hi:
            hi = max(hi, end)
            continue
        first = bisect_left(starts, lo, done)
        done = bisect_right(starts, hi, first)
        picked += queries[first:done]
        lo, hi = start, end
    return picked
