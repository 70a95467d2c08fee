"""Interval arithmetic on (start, end) pairs in µs: unions and overlaps, for GPU busy/idle time."""
from __future__ import annotations

from bisect import bisect_left, bisect_right


def union(intervals) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def total(intervals) -> float:
    return sum(b - a for a, b in intervals)


def clip(intervals, start: float, end: float) -> list[tuple[float, float]]:
    return [(max(a, start), min(b, end)) for a, b in intervals if b > start and a < end]


def complement(merged, start: float, end: float) -> list[tuple[float, float]]:
    """Gaps in [start, end] not covered by the merged (sorted, disjoint) intervals."""
    gaps, cursor = [], start
    for a, b in merged:
        if a > cursor:
            gaps.append((cursor, min(a, end)))
        cursor = max(cursor, b)
    if cursor < end:
        gaps.append((cursor, end))
    return [(a, b) for a, b in gaps if b > a]


def overlap(a_merged, b_merged) -> float:
    """Length of the intersection of two merged interval lists."""
    i = j = 0
    out = 0.0
    while i < len(a_merged) and j < len(b_merged):
        lo = max(a_merged[i][0], b_merged[j][0])
        hi = min(a_merged[i][1], b_merged[j][1])
        if hi > lo:
            out += hi - lo
        if a_merged[i][1] < b_merged[j][1]:
            i += 1
        else:
            j += 1
    return out


def intersect(a_merged, b_merged) -> list[tuple[float, float]]:
    i = j = 0
    out = []
    while i < len(a_merged) and j < len(b_merged):
        lo = max(a_merged[i][0], b_merged[j][0])
        hi = min(a_merged[i][1], b_merged[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a_merged[i][1] < b_merged[j][1]:
            i += 1
        else:
            j += 1
    return out


class Merged:
    """A merged (sorted, disjoint) interval list clipped to many windows: each window found by bisection,
    not by a scan of the whole list (a step's syncs among a trace's)."""

    def __init__(self, merged: list[tuple[float, float]]):
        self.merged = merged
        self.starts = [a for a, _ in merged]
        self.ends = [b for _, b in merged]

    def clip(self, start: float, end: float) -> list[tuple[float, float]]:
        """What clip(merged, start, end) gives."""
        i, j = bisect_right(self.ends, start), bisect_left(self.starts, end)
        return [(max(a, start), min(b, end)) for a, b in self.merged[i:j]]
