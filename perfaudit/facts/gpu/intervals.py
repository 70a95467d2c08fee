"""Interval arithmetic on (start, end) pairs in µs: unions and overlaps, for GPU busy/idle time."""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import chain


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
    inside = clip(merged, start, end) if merged and (merged[0][0] < start or merged[-1][1] > end) else merged
    bounds = [start, *chain.from_iterable(inside), end]  # start, a0, b0, a1, b1, …, end: the gaps pair up
    return [(a, b) for a, b in zip(bounds[0::2], bounds[1::2]) if b > a]


def overlap(a_merged, b_merged) -> float:
    """Length of the intersection of two merged interval lists."""
    return total(intersect(a_merged, b_merged))


def intersect(a_merged, b_merged) -> list[tuple[float, float]]:
    """The intersection of two merged (sorted, disjoint) interval lists, merged. When one is much shorter
    (a step's few sync calls against its thousand idle gaps), each of its intervals is found in the other
    by bisection instead of walking both."""
    few, many = (a_merged, b_merged) if len(a_merged) <= len(b_merged) else (b_merged, a_merged)
    if len(few) * 8 < len(many):
        return _intersect_few(few, many)
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


def _intersect_few(few, many) -> list[tuple[float, float]]:
    starts, ends = [a for a, _ in many], [b for _, b in many]
    out: list[tuple[float, float]] = []
    for lo, hi in few:
        first = bisect_right(ends, lo)          # the first interval ending after lo
        last = bisect_left(starts, hi, first)   # the first starting at or after hi
        if first < last:
            seg = many[first:last]
            seg[0] = (max(seg[0][0], lo), seg[0][1])
            seg[-1] = (seg[-1][0], min(seg[-1][1], hi))
            out += [(a, b) for a, b in seg if b > a]
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
