"""Line suppressions: `# perfaudit: ignore[SYNC001, COPY001]` or a bare `# perfaudit: ignore` on the
offending line. A suppression that matches no finding is reported, so stale ones get cleaned up."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace

from ..findings import Cost, Finding, Location

_COMMENT = re.compile(r"#\s*perfaudit:\s*ignore(?:\[([A-Za-z0-9_,\s]*)\])?")
STALE_RULE = "NOQA001"


@dataclass(frozen=True)
class Suppression:
    path: str
    line: int
    rules: frozenset[str]  # empty: every rule

    def covers(self, rule: str) -> bool:
        return not self.rules or rule in self.rules


def scan(path: str) -> list[Suppression]:
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return []
    out = []
    for number, text in enumerate(lines, 1):
        m = _COMMENT.search(text)
        if m:
            ids = frozenset(r.strip().upper() for r in (m.group(1) or "").split(",") if r.strip())
            out.append(Suppression(path, number, ids))
    return out


def apply(findings: list[Finding], files: set[str], stale_rule=None) -> tuple[list[Finding], list[Finding]]:
    """Drop suppressed locations (and findings left with none); return (kept, stale-suppression findings
    under `stale_rule`, the NOQA001 rule, when it is selected)."""
    table: dict[tuple[str, int], Suppression] = {}
    for path in files:
        for s in scan(path):
            table[(os.path.realpath(path), s.line)] = s
    used: set[tuple[str, int]] = set()
    kept = []
    for f in findings:
        if not f.locations:
            kept.append(f)
            continue
        locations = []
        for loc in f.locations:
            key = (os.path.realpath(loc.path), loc.line)
            here = table.get(key)
            if here is not None and here.covers(f.rule):
                used.add(key)
            else:
                locations.append(loc)
        if locations:
            kept.append(f if len(locations) == len(f.locations) else replace(f, locations=tuple(locations)))
    stale = [
        Finding(stale_rule.id, stale_rule.title, stale_rule.tips, stale_rule.severity,
                f"`# perfaudit: ignore{('[' + ', '.join(sorted(s.rules)) + ']') if s.rules else ''}` matches no finding",
                stale_rule.fix, Cost(None, None),
                (Location(os.path.relpath(s.path) if not os.path.relpath(s.path).startswith("..") else s.path,
                          s.line, "", "unused suppression"),))
        for key, s in sorted(table.items()) if key not in used
    ] if stale_rule is not None else []
    return kept, stale
