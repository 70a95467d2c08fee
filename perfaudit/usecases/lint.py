"""`lint`: what the source alone shows, without running it (no torch import)."""
from __future__ import annotations

from ..engine.loader import Rule, load_rules
from ..findings import Report
from ..policy import gate
from ..policy.gate import GateOptions
from ..static import lint as lint_paths
from ..static import python_files
from ..static.registry import CHECKS


def lint(paths: list[str], rules: list[Rule] | None = None, gate_options: GateOptions | None = None) -> Report:
    """What the source alone shows, without running it (imports no torch)."""
    rules = rules if rules is not None else load_rules()
    files = python_files(paths)
    checked = {spec.rule for specs in CHECKS.values() for spec in specs}
    report = Report([], [], [], files=len(files), static_rules=sorted(r.id for r in rules if r.id in checked))
    report.findings = lint_paths(files, rules, report.notes, report.unread)
    report.notes.append(f"static pass over {len(files)} file(s); `perfaudit run` measures what it finds")
    return gate.finalize(report, gate_options or GateOptions(), extra_files=tuple(files), rules=rules)
