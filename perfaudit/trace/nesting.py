"""Which events enclose which: one sorted sweep per thread with a stack of open intervals."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from .model import Event


def _thread(ev: Event) -> tuple:
    return (ev.pid, ev.tid)


def enclosing(containers: list[Event], queries: list[Event]) -> Iterator[tuple[Event, list[Event]]]:
    """For each query, the containers on its thread that enclose its start, outermost first.

    `containers` must be sorted by (ts, -dur), as the parser leaves them; host events nest properly
    within a thread. The stack yielded is live: copy it to keep it.
    """
    by_thread: dict[tuple, list[Event]] = defaultdict(list)
    for ev in containers:
        by_thread[_thread(ev)].append(ev)
    grouped: dict[tuple, list[Event]] = defaultdict(list)
    for q in queries:
        grouped[_thread(q)].append(q)
    for key, qs in grouped.items():
        outer = by_thread.get(key, [])
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


def innermost(containers: list[Event], queries: list[Event]) -> dict[int, Event]:
    """id(query) -> the innermost container enclosing it (queries without one are left out)."""
    out = {}
    for q, stack in enclosing(containers, queries):
        for ev in reversed(stack):
            if ev is not q and ev.end >= q.end:
                out[id(q)] = ev
                break
    return out
