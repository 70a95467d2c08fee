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


def enclosing(containers: list[Event], queries: list[Event], grouped_containers: dict | None = None
              ) -> Iterator[tuple[Event, list[Event]]]:
    """For each query, the containers on its thread that enclose its start, outermost first.

    `containers` must be sorted by (ts, -dur), as the parser leaves them; host events nest properly
    within a thread. The stack yielded is live: copy it to keep it.
    """
    threads = grouped_containers if grouped_containers is not None else by_thread(containers)
    grouped: dict[tuple, list[Event]] = defaultdict(list)
    for q in queries:
        grouped[(q.pid, q.tid)].append(q)
    for key, qs in grouped.items():
        outer = threads.get(key, [])
        qs.sort(key=lambda e: e.ts)
        stack: list[Event] = []
        i = 0
        for q in qs:
            while i < len(outer) and outer[i].ts <= q.ts:
                e = outer[i]
                i += 1
                while stack and stack[-1].end < e.ts:
                    stack.pop()
                stack.append(e)  # q itself too, when it is a container: it may enclose later queries
            while stack and stack[-1].end < q.ts:
                stack.pop()
            yield q, ([e for e in stack if e is not q] if any(e is q for e in stack) else stack)


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
