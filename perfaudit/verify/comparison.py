"""What comparing two runs finds: the diff of A and B (speed, parts, findings, ops, environment)
and a bisection's verdicts per commit, shared by the use cases that compute them and the reporters."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..findings import Report
from .stats import SpeedChange

SHARE_OF_REGRESSION = 0.25  # bisect: a commit is bad from this share of the regression at --bad (unless exact)


@dataclass
class FindingChange:
    rule: str
    title: str
    severity: str
    status: str              # new | gone | changed | same
    where: str | None        # path:line (B's; A's for a finding that is gone)
    code: str
    ms_a: float | None       # its cost per step in A and in B
    ms_b: float | None
    message: str             # B's (A's for a finding that is gone)


@dataclass
class Diff:
    a: str
    b: str
    report_a: Report
    report_b: Report
    speed: SpeedChange
    host: list[dict] = field(default_factory=list)    # {part, a_ms, b_ms, delta_ms}
    gpu: list[dict] = field(default_factory=list)
    grew: dict | None = None                          # the part that grew most: {side, part, delta_ms}
    findings: list[FindingChange] = field(default_factory=list)
    ops_kind: str | None = None
    ops: list[dict] = field(default_factory=list)     # {name, a_ms, b_ms, delta_ms}
    environment: list[dict] = field(default_factory=list)  # {key, a, b}
    unprofiled: SpeedChange | None = None  # the steps timed without the profiler, where both sides have 3 or more

    @property
    def changed_findings(self) -> list[FindingChange]:
        return [f for f in self.findings if f.status != "same"]


@dataclass
class Commit:
    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:10]


@dataclass
class Comparison:
    """One commit timed against the good one."""
    commit: Commit
    verdict: str                  # bad | good | skip
    why: str                      # what decided it (the interval against the threshold, a failure)
    speed: SpeedChange | None
    rounds: int


@dataclass
class BisectResult:
    good: Commit
    bad: Commit
    commits: list[Commit]               # after good, up to bad, oldest first (first-parent history)
    threshold_pct: float
    bar_pct: float = 0.0                # the threshold applied: --threshold, or a share of the regression seen
    comparisons: list[Comparison] = field(default_factory=list)
    culprit: Commit | None = None
    parent: Commit | None = None
    candidates: list[Commit] = field(default_factory=list)  # when skips leave several commits: one of these
    conclusion: str = ""
    diff: Diff | None = None            # the culprit's parent against the culprit, audited
    folder: str = ""                    # the runs (each comparison's rounds, the two audits)
    interrupted: int | None = None      # the stop signal that ended it before a conclusion

    @property
    def timed_pairs(self) -> int:
        return sum(c.rounds for c in self.comparisons)

    @property
    def most_comparisons(self) -> int:
        return math.ceil(math.log2(max(len(self.commits), 1))) + 1
