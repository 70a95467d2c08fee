"""What a team's CI gate adds to a report: severity overrides, line suppressions, a baseline."""
from __future__ import annotations

import os
import re
from dataclasses import replace

from . import baseline as baseline_file
from . import suppress
from .api import Report
from .config import Config
from .findings import Finding, rank

_PLACEHOLDER = re.compile(r"\{[A-Za-z_][\w.]*(?::[^{}]*)?\}")


def static_fix(rule) -> str:
    """A rule's fix text without run figures (for findings from the source alone)."""
    return _PLACEHOLDER.sub("…", rule.fix)


def finalize(report: Report, cfg: Config, baseline: str | None = None, baseline_write: str | None = None,
             extra_files: tuple[str, ...] = (), rules: list | None = None) -> Report:
    findings: list[Finding] = [replace(f, severity=cfg.severity[f.rule]) if f.rule in cfg.severity else f
                               for f in report.findings]
    files = {loc.path for f in findings for loc in f.locations} | {p for p in extra_files if p}
    report_stale = rules is None or any(r.id == suppress.STALE_RULE for r in rules)
    findings, stale = suppress.apply(findings, {p for p in files if os.path.isfile(p)}, report_stale)
    findings += stale
    if baseline_write:
        baseline_file.write(baseline_write, findings)
        report.notes.append(f"baseline written to {baseline_write} ({len(findings)} finding(s))")
    if baseline:
        known = baseline_file.read(baseline)
        new = baseline_file.new_findings(findings, known)
        report.notes.append(f"baseline {baseline}: {len(findings) - len(new)} known finding(s) not reported")
        findings = new
    report.findings = rank(findings)
    return report


def confirm_static(report: Report, static: list[Finding]) -> None:
    """A finding the run measured that the static pass also saw: reported once, with both evidences."""
    seen = {(f.rule, os.path.realpath(loc.path), loc.line) for f in static for loc in f.locations}
    confirmed = []
    for f in report.findings:
        if any((f.rule, os.path.realpath(loc.path), loc.line) in seen for loc in f.locations):
            f = replace(f, notes=f.notes + ("Confirmed by the static pass: the source and the run agree "
                                            "(high confidence).",),
                        evidence={**f.evidence, "confidence": "high"})
        confirmed.append(f)
    report.findings = confirmed
