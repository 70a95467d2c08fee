"""What a team's CI gate adds to a report: severity overrides, line suppressions, a baseline."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from ..findings import UNKNOWN_WHERE, Finding, Report, rank
from . import baseline as baseline_file
from . import suppress
from .config import Config


@dataclass
class GateOptions:
    """What the team's CI gate adds: configuration (severity overrides), a baseline to compare with or
    to write. Line suppressions always apply."""
    config: Config = field(default_factory=Config)
    baseline: str | None = None
    baseline_write: str | None = None


def finalize(report: Report, options: GateOptions, extra_files: tuple[str, ...] = (),
             rules: list | None = None) -> Report:
    cfg, baseline, baseline_write = options.config, options.baseline, options.baseline_write
    findings: list[Finding] = [replace(f, severity=cfg.severity[f.rule]) if f.rule in cfg.severity else f
                               for f in report.findings]
    files = {loc.path for f in findings for loc in f.locations} | {p for p in extra_files if p}
    stale_rule = next((r for r in rules or () if r.id == suppress.STALE_RULE), None)
    findings, stale = suppress.apply(findings, {p for p in files if os.path.isfile(p)}, stale_rule)
    findings += stale
    if baseline_write:
        baseline_file.write(baseline_write, findings)
        report.notes.append(f"baseline written to {baseline_write} ({len(findings)} finding(s))")
    if baseline:
        known = baseline_file.read(baseline)
        new = baseline_file.new_findings(findings, known, baseline)
        report.notes.append(f"baseline {baseline}: {len(findings) - len(new)} known finding(s) not reported")
        findings = new
    report.findings = rank(findings)
    return report


STATIC_ONLY_NOTE = ("Seen in the source only: the run did not measure this line (a path not taken in the "
                    "window, such as CUDA-only or distributed code, or a cost below the rule's threshold); "
                    "lower confidence.")


def merge_static(report: Report, static: list[Finding]) -> None:
    """What the static pass saw in the audited script, merged into the run's report: a finding the run
    measured too is reported once, with both evidences (high confidence); one only the source shows
    is kept as `info`, marked as such, so the report never drops or contradicts what the source says."""
    def key(f, loc):
        return f.rule, os.path.realpath(loc.path), loc.line
    seen = {key(f, loc) for f in static for loc in f.locations}
    findings = [_locate_statically(f, static) for f in report.findings]
    measured = {key(f, loc) for f in findings for loc in f.locations}
    merged = []
    for f, was in zip(findings, report.findings):
        if f is was and any(key(f, loc) in seen for loc in f.locations):  # (a placed one says so already)
            f = replace(f, notes=f.notes + ("Confirmed by the static pass: the source and the run agree "
                                            "(high confidence).",),
                        evidence={**f.evidence, "confidence": "high", "origin": "both"})
        merged.append(f)
    for f in static:
        if not any(key(f, loc) in measured for loc in f.locations):
            merged.append(replace(f, severity="info", notes=(STATIC_ONLY_NOTE,),
                                  evidence={**f.evidence, "confidence": "low", "origin": "static"}))
    report.findings = merged


def _locate_statically(f: Finding, static: list[Finding]) -> Finding:
    """A measured finding no frame located (a DataLoader, layer or optimizer built before a callback's
    session began) takes the places the static pass found for the same rule, when it found exactly as
    many as the run measured."""
    if f.locations:
        return f
    places = [loc for s in static if s.rule == f.rule for loc in s.locations]
    measured = f.evidence.get("n_sites") or 1
    if not places or len(places) != measured:
        return f
    where = ", ".join(f"{p.path}:{p.line}" for p in places[:3])
    return replace(f, locations=tuple(places), message=f.message.replace(UNKNOWN_WHERE, where),
                   notes=f.notes + ("Located by the static pass: the run measured it, the source shows the "
                                    f"{'line' if measured == 1 else f'{measured} lines'} it comes from.",))


def gate_fails(report: Report, level: str, needs_training: bool = False, allow_no_training: bool = False) -> bool:
    """Whether the gate at `level` fails the report. With `needs_training`, an active gate also fails a
    run in which no training step was measured (nothing measured is not a pass), unless allowed."""
    unmeasured = needs_training and level != "never" and not report.measured and not allow_no_training
    if unmeasured:
        report.notes.append(f"gate (--fail-on {level}): no training step was measured, so nothing was "
                            "checked; this fails the gate (--allow-no-training to let it pass)")
    unread = level != "never" and bool(report.unread)
    if unread:
        report.notes.append(f"gate (--fail-on {level}): {len(report.unread)} file(s) could not be parsed, so "
                            "they were not checked; this fails the gate")
    return report.fails(level) or unmeasured or unread
