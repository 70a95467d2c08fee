"""The numbers of an A/B comparison: the change of the step time with a bootstrap interval, and
whether the loss stayed the same. Pure Python: a few hundred samples need no numerical library."""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

from ..collect.clock import disturbed as step_disturbed

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
MIN_STEPS = 8               # per variant, for an interval worth printing
EXACT_RTOL = 1e-4           # "the same loss": float noise of a reordered sum (foreach/fused optimizers)
STAT_REL_TOL = 0.2          # a fix that changes initialisation or data order: mean loss within 20 % ...
STAT_SPREAD_TOL = 4.0       # ... or within 4 standard deviations of A's own rounds, whichever is wider


TRIM = 0.1                  # the share of steps cut at each end before averaging


def trimmed_mean(values: list[float], trim: float = TRIM) -> float:
    """The mean without the slowest and fastest `trim` of the steps. Not the median: DataLoader
    workers deliver batches in bursts, so step times are often bimodal (a wait every other step) and
    the median then picks one mode; the trimmed mean is the throughput, without one-off pauses."""
    ordered = sorted(values)
    cut = int(len(ordered) * trim)
    kept = ordered[cut:len(ordered) - cut] or ordered
    return sum(kept) / len(kept) if kept else math.nan  # no counted step (every run was disturbed)


@dataclass
class SpeedChange:
    mean_a_ms: float             # the trimmed mean step time of A (see trimmed_mean)
    mean_b_ms: float
    delta_ms: float                # B - A (negative: B is faster)
    low_ms: float                  # the interval of delta
    high_ms: float
    n_a: int
    n_b: int
    verdict: str                   # faster | slower | no measurable change | too few steps
    tolerance_pct: float = 2.0     # an interval within ±this share of A's step is "no change"

    @property
    def within_tolerance(self) -> bool:
        """The whole interval lies within ±tolerance of A's step: any change is too small to matter."""
        if math.isnan(self.low_ms) or not self.mean_a_ms:
            return False
        bound = self.mean_a_ms * self.tolerance_pct / 100.0
        return -bound <= self.low_ms and self.high_ms <= bound

    @property
    def change_pct(self) -> float:
        """B's step time against A's, in % (negative: B is faster)."""
        return 100.0 * self.delta_ms / self.mean_a_ms if self.mean_a_ms else 0.0

    @property
    def speedup_pct(self) -> float:
        return 100.0 * (self.mean_a_ms - self.mean_b_ms) / self.mean_a_ms if self.mean_a_ms else 0.0

    @property
    def saved_ms(self) -> float:
        return -self.delta_ms


def undisturbed_steps(times: list[float], waited: list[float] | None) -> tuple[list[float], int]:
    """The step times (s) without the steps whose threads waited for a CPU held by other processes, and
    how many were left out. A wait is the machine's, not the fix's: on a busy machine it would decide
    the verdict. At least half the steps are kept (the least disturbed), so a run always counts."""
    if not waited or len(waited) != len(times):
        return list(times), 0
    disturbed = {i for i, (t, w) in enumerate(zip(times, waited)) if step_disturbed(w, t)}
    if len(times) - len(disturbed) < (len(times) + 1) // 2:
        least = sorted(disturbed, key=lambda i: waited[i] / max(times[i], 1e-9))
        disturbed -= set(least[:(len(times) + 1) // 2 - (len(times) - len(disturbed))])
    return [t for i, t in enumerate(times) if i not in disturbed], len(disturbed)


def undisturbed_unprofiled_s(rows: list[dict]) -> list[float]:
    """A run's steps timed after its window without the profiler (rows of wall_ms and waited_ms, as the report's
    summary holds them), in seconds, less those a busy machine disturbed: what `diff` compares and the report's
    steps row gives, counted as verify counts its own steps."""
    kept, _ = undisturbed_steps([r["wall_ms"] / 1000.0 for r in rows], [r["waited_ms"] / 1000.0 for r in rows])
    return kept


def _rounds_ms(values) -> list[list[float]]:
    """Step times in ms, per round (a flat list is one round)."""
    rounds = values if values and isinstance(values[0], list) else [values]
    return [[x * 1000.0 for x in r] for r in rounds if r]


def _resample(rounds: list[list[float]], rng: random.Random) -> list[float]:
    """A bootstrap sample that keeps each run's own level: rounds drawn with replacement, then steps
    within each. Steps of one process are not independent (its memory layout, its neighbours on the
    machine), so resampling steps alone would give intervals too narrow to trust."""
    picked = [rounds[rng.randrange(len(rounds))] for _ in rounds]
    return [x for r in picked for x in rng.choices(r, k=len(r))]


def speed_change(a_s, b_s, seed: int = 0, tolerance_pct: float = 2.0, min_steps: int = MIN_STEPS) -> SpeedChange:
    """Step time of A and B (trimmed means; seconds in, ms out; each a list of steps or a list of
    rounds of steps) and a bootstrap interval of their difference. The verdict says faster/slower
    only when the interval excludes zero."""
    a_rounds, b_rounds = _rounds_ms(a_s), _rounds_ms(b_s)
    a, b = [x for r in a_rounds for x in r], [x for r in b_rounds for x in r]
    med_a, med_b = trimmed_mean(a), trimmed_mean(b)
    if len(a) < min_steps or len(b) < min_steps:
        return SpeedChange(med_a, med_b, med_b - med_a, math.nan, math.nan, len(a), len(b), "too few steps",
                           tolerance_pct)
    rng = random.Random(seed)
    deltas = sorted(trimmed_mean(_resample(b_rounds, rng)) - trimmed_mean(_resample(a_rounds, rng))
                    for _ in range(BOOTSTRAP_RESAMPLES))
    tail = (1 - CONFIDENCE) / 2
    low, high = deltas[int(tail * len(deltas))], deltas[int((1 - tail) * len(deltas)) - 1]
    verdict = "faster" if high < 0 else "slower" if low > 0 else "no measurable change"
    return SpeedChange(med_a, med_b, med_b - med_a, low, high, len(a), len(b), verdict, tolerance_pct)


@dataclass
class LossCheck:
    verdict: str        # same | within tolerance | changed | diverged | no loss seen
    detail: str
    passed: bool


def _finite(values) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def loss_check(a_rounds: list[list[float | None]], b_rounds: list[list[float | None]], same_maths: bool) -> LossCheck:
    """Compare the per-step losses of A and B (one list per round). Fixes that must not change the
    maths must give the same loss step for step (when A repeats itself exactly); the others, and A
    that does not repeat itself, a mean loss within a tolerance. Non-finite B loss where A is finite
    is divergence."""
    a_all = [v for r in a_rounds for v in r if v is not None]
    b_all = [v for r in b_rounds for v in r if v is not None]
    if not a_all or not b_all:
        return LossCheck("no loss seen", "backward() was not called on a scalar loss in the window", True)
    if not _finite(a_all):
        return LossCheck("not comparable", "the script as it is has no finite loss (NaN or inf from the start), "
                                           "so the loss cannot show whether the fix changed the training", True)
    if not _finite(b_all) or (any(not math.isfinite(v) for v in b_all) and all(math.isfinite(v) for v in a_all)):
        return LossCheck("diverged", f"B's loss became {next(v for v in b_all if not math.isfinite(v))} "
                                     "where A's stayed finite", False)
    # does A repeat itself? then the step-by-step comparison means something
    a_spread = max((_rel(x, y) for r in a_rounds[1:] for x, y in zip(a_rounds[0], r) if x is not None and y is not None
                    and math.isfinite(x) and math.isfinite(y)), default=0.0)
    once = len([r for r in a_rounds if r]) < 2  # A ran once: whether it repeats itself is not known
    deterministic = a_spread <= EXACT_RTOL
    if same_maths and deterministic:
        pairs = [(x, y) for ra, rb in zip(a_rounds, b_rounds) for x, y in zip(ra, rb) if x is not None and y is not None]
        worst = max((_rel(x, y) for x, y in pairs), default=0.0)
        if worst <= EXACT_RTOL:
            return LossCheck("same", f"all {len(pairs)} steps equal to A's (largest relative difference "
                                     f"{worst:.0e})", True)
        if once:  # a difference may be the script's own randomness (it reseeds itself): compare the means
            deterministic = False
        else:
            return LossCheck("changed", f"the loss differs from A's by up to {100 * worst:.2g}% at the same step "
                                        f"(A repeats itself within {a_spread:.1e}): this fix should not change the "
                                        "maths", False)
    means_a = [statistics.fmean(_finite(r)) for r in a_rounds if _finite(r)]
    mean_a, mean_b = statistics.fmean(_finite(a_all)), statistics.fmean(_finite(b_all))
    sd = statistics.stdev(means_a) if len(means_a) > 1 else 0.0
    tol = max(STAT_SPREAD_TOL * sd, STAT_REL_TOL * abs(mean_a))
    why = "" if deterministic or not same_maths else \
        "A ran once, so whether it repeats itself is not known (a script that seeds itself from the clock does "\
        "not), and the means are compared; " if once else \
        f"A does not repeat itself (its rounds differ by up to {100 * a_spread:.2g}%), so the means are compared; "
    if abs(mean_b - mean_a) <= tol:
        return LossCheck("within tolerance", f"{why}mean {mean_b:.4g} against A's {mean_a:.4g} "
                                             f"(tolerance ±{tol:.3g})", True)
    return LossCheck("changed", f"{why}mean loss {mean_b:.4g} against A's {mean_a:.4g}, beyond the "
                                f"tolerance ±{tol:.3g}", False)


def _rel(x: float, y: float) -> float:
    return abs(x - y) / max(abs(x), abs(y), 1e-12)
