"""The step-time history of a project (one JSON object per audited commit) judged: is the newest entry
slower than the recent ones beyond their noise, and where in the recent history did the step time shift?
Pure functions over the entries; reading and writing the file is the use case's (usecases/history.py)."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

NOISE_FLOOR_PCT = 2.0     # and never less than this share of the step (runs differ by a few % anyway)
SHIFT_MIN_PCT = 5.0       # a change point: the step time's level shifted by at least this much ...
SHIFT_MIN_T = 5.0         # ... and by this many standard errors (the best of all splits: 0.4 % false alarms on ±8 % noise)
MIN_EARLIER = 3           # earlier entries needed to know the noise between runs (before it: no verdict)
MIN_LEVEL = 2             # entries on each side of a change point (one slow run is not yet a new level)
OUTLIER_SIGMAS = 3.5       # a run this far off its level (robust deviations) is left out of the spread
MAD_TO_SIGMA = 1.4826     # the median absolute deviation of a normal sample, as its standard deviation
# what a step's time is read from: the steps the run timed after its window with nothing recording them (the
# script's own time; the profiler's cost per call weighs on Python-heavy code several times more than on its
# math), else the recorded steps (an entry from before perfaudit timed them, a run too short to)
BASES = {"unprofiled_ms": "the step timed without the profiler", "step_ms": "the step as recorded"}


@dataclass
class ChangePoint:
    index: int                 # the first entry of the new level (in the compared series)
    entry: dict
    before_ms: float           # the median step time before it and from it on
    after_ms: float
    entries_after: int         # entries at the new level, this one included

    @property
    def change_pct(self) -> float:
        return 100.0 * (self.after_ms - self.before_ms) / self.before_ms


@dataclass
class HistoryCheck:
    entry: dict                          # the newest entry
    compared: list[dict]                 # the earlier entries it is judged against (same script and device)
    baseline_ms: float | None = None     # their median step time
    noise_pct: float | None = None       # the change the noise between runs alone may make (see _noise_pct)
    noise_from: str = ""                 # what the noise was estimated from
    change_pct: float | None = None      # the newest against the baseline
    verdict: str = "first"               # first | too few | slower | faster | steady | busy | unmeasured
    change_point: ChangePoint | None = None
    new_findings: list[str] = field(default_factory=list)   # "RULE path:line", against the previous entry
    gone_findings: list[str] = field(default_factory=list)
    fail_on_slowdown_pct: float | None = None
    stopped_by: str | None = None        # the signal that stopped the run: shown, not recorded
    basis: str = "step_ms"               # the entries' figure compared (BASES)

    @property
    def fails(self) -> bool:
        """The gate: slower beyond the noise and by more than --fail-on-slowdown."""
        return (self.fail_on_slowdown_pct is not None and self.verdict == "slower"
                and self.change_pct is not None and self.change_pct > self.fail_on_slowdown_pct)


def _timed(entry: dict, basis: str) -> bool:
    value = entry.get(basis)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def comparable(entries: list[dict], latest: dict, basis: str = "step_ms") -> list[dict]:
    """The earlier entries timed like the newest one: the same script on the same kind of device, on a
    machine that was not too busy to time it, with the figure `basis` names."""
    return [e for e in entries if e.get("script") == latest.get("script") and e.get("device") == latest.get("device")
            and _timed(e, basis) and not e.get("busy")]


def basis_of(entries: list[dict], latest: dict, window: int) -> str:
    """The step without the profiler where the newest entry and MIN_EARLIER of the recent comparable ones have it
    (a history written before perfaudit timed it moves over once that many have), else the recorded step."""
    if _timed(latest, "unprofiled_ms"):
        recent = comparable(entries, latest)[-window:] if window else []
        if sum(_timed(e, "unprofiled_ms") for e in recent) >= MIN_EARLIER:
            return "unprofiled_ms"
    return "step_ms"


def check(entries: list[dict], latest: dict, window: int = 20, fail_on_slowdown_pct: float | None = None) -> HistoryCheck:
    """Judge `latest` against the last `window` comparable entries of `entries` (oldest first), on the figure
    basis_of chooses."""
    basis = basis_of(entries, latest, window)
    earlier = comparable(entries, latest, basis)[-window:] if window else []
    out = HistoryCheck(latest, earlier, fail_on_slowdown_pct=fail_on_slowdown_pct, basis=basis)
    previous = earlier[-1] if earlier else None
    if previous is not None:
        now, before = _findings(latest), _findings(previous)
        out.new_findings = sorted(now[k] for k in now.keys() - before.keys())
        out.gone_findings = sorted(before[k] for k in before.keys() - now.keys())
    step = latest.get(basis)
    if not isinstance(step, (int, float)):
        out.verdict = "unmeasured"
        return out
    if latest.get("busy"):  # recorded (for its findings), neither judged nor used as a baseline
        out.verdict = "busy"
        return out
    if not earlier:
        return out
    # the current level: the entries since the earlier ones' own change point (an accepted regression or
    # a speed-up is the new normal), the spread between runs pooled over both levels
    shift = change_point(earlier, basis)
    segments = [earlier[:shift.index], earlier[shift.index:]] if shift else [earlier]
    level = [e[basis] for e in segments[-1]]
    out.baseline_ms = statistics.median(level)
    out.change_pct = 100.0 * (step - out.baseline_ms) / out.baseline_ms
    out.noise_pct, out.noise_from = _noise_pct([[e[basis] for e in seg] for seg in segments], out.baseline_ms)
    if shift:
        out.noise_from += f"; the level since {str(shift.entry.get('commit'))[:10]} ({len(level)} entries)"
    out.change_point = change_point(earlier + [latest], basis)
    if len(earlier) < MIN_EARLIER:  # how far apart two runs fall by chance is not known yet
        out.verdict = "too few"
    elif abs(out.change_pct) <= out.noise_pct:
        out.verdict = "steady"
    else:
        out.verdict = "slower" if out.change_pct > 0 else "faster"
    return out


def _findings(entry: dict) -> dict:
    """An entry's findings by what identifies one across commits (rule, file, code of the line: a line
    that moved with an edit above it is the same finding), each shown as "RULE path:line"."""
    out = {}
    for f in entry.get("findings") or ():
        if isinstance(f, dict) and f.get("rule"):
            where = f.get("where") or ""
            out[(f["rule"], where.rsplit(":", 1)[0], f.get("code") or "")] = f"{f['rule']} {where}".strip()
    return out


def _noise_pct(segments: list[list[float]], baseline: float) -> tuple[float, str]:
    """How far the newest run may fall from the current level by chance: a 99.5 % one-sided prediction
    bound from the spread between runs (Student's t on their standard deviation about their level's mean,
    pooled over the levels; wide while the entries are few: 10 deviations from 3 entries, 3 from 11). A run
    far off its level (beyond OUTLIER_SIGMAS robust deviations: one that a busy machine slowed) is left
    out of the spread, or one such run would widen the bound for the next `window` commits; unless that
    leaves fewer than MIN_EARLIER runs (the bound from 2 would be 64 deviations wide, from 3 with it 10)."""
    kept = [_without_outliers(seg) for seg in segments]
    if sum(map(len, kept)) < MIN_EARLIER or not all(kept):  # too few left to know the spread: keep them all
        kept = [list(seg) for seg in segments]
    n, dropped = sum(map(len, kept)), sum(map(len, segments)) - sum(map(len, kept))
    df = n - len(kept)
    sse = sum((v - statistics.fmean(seg)) ** 2 for seg in kept for v in seg)
    sigma = math.sqrt(sse / df) if df > 0 else 0.0
    noise = max(_t995(df) * math.sqrt(1 + 1 / len(kept[-1])) * 100.0 * sigma / baseline, NOISE_FLOOR_PCT)
    why = f"the spread of {n} earlier entries" + (f", {dropped} far-off run(s) left out" if dropped else "")
    if noise == NOISE_FLOOR_PCT:
        why += f"; the {NOISE_FLOOR_PCT:g} % floor"
    return noise, why


def _without_outliers(values: list[float]) -> list[float]:
    middle = statistics.median(values)
    robust = max(MAD_TO_SIGMA * statistics.median(abs(v - middle) for v in values), 0.01 * middle)
    return [v for v in values if abs(v - middle) <= OUTLIER_SIGMAS * robust]


_T995 = {1: 63.657, 2: 9.925, 3: 5.841, 4: 4.604, 5: 4.032, 6: 3.707, 7: 3.499, 8: 3.355, 9: 3.250, 10: 3.169,
         12: 3.055, 15: 2.947, 20: 2.845, 25: 2.787, 30: 2.750, 40: 2.704, 60: 2.660, 120: 2.617}


def _t995(df: int) -> float:
    """Student's t, 99.5 % quantile, for `df` degrees of freedom (interpolated in the table's gaps)."""
    keys = sorted(_T995)
    if df >= keys[-1]:
        return 2.576
    df = max(df, 1)
    lo, hi = max(k for k in keys if k <= df), min(k for k in keys if k >= df)
    return _T995[lo] if lo == hi else _T995[lo] + (_T995[hi] - _T995[lo]) * (df - lo) / (hi - lo)


def change_point(entries: list[dict], basis: str = "step_ms") -> ChangePoint | None:
    """The one split of the series (each entry's `basis`) into an earlier and a later level that best explains
    it (the largest shift in standard errors), when the shift is both large (SHIFT_MIN_PCT) and clear
    (SHIFT_MIN_T), with MIN_LEVEL entries at least on each side."""
    values = [e[basis] for e in entries]
    n = len(values)
    if n < 2 * MIN_LEVEL:
        return None
    best: tuple[float, int] = (-1.0, MIN_LEVEL)
    for k in range(MIN_LEVEL, n - MIN_LEVEL + 1):
        left, right = values[:k], values[k:]
        ml, mr = statistics.fmean(left), statistics.fmean(right)
        sse = sum((v - ml) ** 2 for v in left) + sum((v - mr) ** 2 for v in right)
        sigma = max(math.sqrt(sse / (n - 2)) if n > 2 else 0.0, 0.01 * statistics.median(values))
        t = abs(mr - ml) / (sigma * math.sqrt(1 / len(left) + 1 / len(right)))
        if t > best[0]:
            best = (t, k)
    t, k = best
    before, after = statistics.median(values[:k]), statistics.median(values[k:])
    if t < SHIFT_MIN_T or abs(after - before) < SHIFT_MIN_PCT / 100.0 * before:
        return None
    return ChangePoint(k, entries[k], before, after, n - k)
