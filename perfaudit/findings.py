"""What an audit produces: frozen result types shared by the engine, the API and the reporters."""
from __future__ import annotations

from dataclasses import dataclass, field

SEVERITIES = ("info", "warning", "error")


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity)


@dataclass(frozen=True)
class Location:
    path: str
    line: int
    code: str = ""
    detail: str = ""
    count_per_step: float | None = None
    ms_per_step: float | None = None
    exact: bool = True  # False: the line of the enclosing function, the call itself was not found


@dataclass(frozen=True)
class Cost:
    ms_per_step: float | None      # estimated time saved per step by the fix
    share_of_step: float | None    # the same as a share of the mean step
    estimated: bool = False        # True: a model of the cost (e.g. a CPU run), not a measurement


@dataclass(frozen=True)
class Finding:
    rule: str
    title: str
    tips: tuple[str, ...]
    severity: str
    message: str
    fix: str
    cost: Cost
    locations: tuple[Location, ...] = ()
    notes: tuple[str, ...] = ()
    evidence: dict = field(default_factory=dict, hash=False, compare=False)
    trace: str | None = None  # which trace, when several were analysed

    @property
    def location(self) -> Location | None:
        return self.locations[0] if self.locations else None


@dataclass(frozen=True)
class Skipped:
    rule: str
    reason: str


def rank(findings: list[Finding]) -> list[Finding]:
    """Biggest estimated saving first; findings without an estimate after, by severity."""
    return sorted(findings, key=lambda f: (
        f.cost.ms_per_step is None,
        -(f.cost.ms_per_step or 0.0),
        -severity_rank(f.severity),
        f.rule,
    ))
