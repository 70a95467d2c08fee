"""Expectations written in the sample scripts themselves, on the line they describe (as semgrep's
`# ruleid:` / `# ok:`):

    running += loss.item()  # expect: SYNC001        the run and the static pass report SYNC001 here
    if loss > 1.0:          # expect-run: SYNC001    only the run can see it (a bool() on a tensor)
    x = t.cuda()            # expect-lint: COPY002   only the static pass reports it
    print(total.item())     # ok: SYNC001            neither may report SYNC001 here
"""
from __future__ import annotations

import re
from functools import cache
from pathlib import Path

_MARKER = re.compile(r"\b(expect|expect-run|expect-lint|ok):\s*([A-Z]+\d{3}(?:\s*,\s*[A-Z]+\d{3})*)")
_MODES = {"expect": ("run", "lint"), "expect-run": ("run",), "expect-lint": ("lint",), "ok": ()}


@cache
def markers(path: str) -> tuple[tuple[int, str, str], ...]:
    """(line, kind, rule) for every marker in the file's comments."""
    out = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        comment = line.partition("#")[2]
        for kind, ids in _MARKER.findall(comment):
            out += [(number, kind, rule.strip()) for rule in ids.split(",")]
    return tuple(out)


def expected_lines(path, rule: str, mode: str) -> set[int]:
    """Lines where `mode` ("run" or "lint") must report `rule`."""
    return {line for line, kind, r in markers(str(path)) if r == rule and mode in _MODES[kind]}


def quiet_lines(path, rule: str, mode: str) -> set[int]:
    """Lines where `mode` must not report `rule`: marked ok, or marked for the other mode only."""
    return {line for line, kind, r in markers(str(path)) if r == rule and mode not in _MODES[kind]}


def marked(path, mode: str) -> set[tuple[str, int]]:
    """Every (rule, line) that `mode` must report in the file."""
    return {(r, line) for line, kind, r in markers(str(path)) if mode in _MODES[kind]}


def located(findings: list[dict], script: str, origins: tuple[str, ...]) -> set[tuple[str, int]]:
    """(rule, line) of a JSON report's findings in `script` whose origin is one of `origins`."""
    return {(f["rule"], loc["line"]) for f in findings if f.get("origin", "run") in origins
            for loc in f["locations"] if Path(loc["path"]).name == script}
