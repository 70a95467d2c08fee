"""Baselines: record today's findings, then fail only on new ones.

A finding is matched on its rule, its file and the code of its line (whitespace-normalised), not on
the line number, so edits above the line do not make it new again. Files are named relative to the
baseline's own folder, so the same baseline works from any working directory."""
from __future__ import annotations

import json
import os
import re
from typing import TypedDict

from .. import untrusted
from ..errors import UsageError
from ..files import write_atomic
from ..findings import Finding

VERSION = 1
_SPACE = re.compile(r"\s+")


def fingerprints(f: Finding, base: str = ".") -> set[str]:
    if not f.locations:
        return {f"{f.rule}::{os.path.basename(f.trace or '')}"}
    return {f"{f.rule}:{_relative(loc.path, base)}:{_normalise(loc.code) or loc.line}" for loc in f.locations}


def _relative(path: str, base: str) -> str:
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(base))
    return rel.replace(os.sep, "/")


def _normalise(code: str) -> str:
    return _SPACE.sub(" ", code or "").strip()


def write(path: str, findings: list[Finding]) -> None:
    base = os.path.dirname(os.path.abspath(path))
    entries = sorted({fp for f in findings for fp in fingerprints(f, base)})
    write_atomic(path, json.dumps({"version": VERSION, "tool": "perfaudit", "fingerprints": entries}, indent=1) + "\n")


class _Baseline(TypedDict):
    fingerprints: list[str]


def read(path: str) -> set[str]:
    """The fingerprints of a baseline file (read as hostile: perfaudit.untrusted)."""
    try:
        data = untrusted.load(path, _Baseline, "a perfaudit baseline (a list of fingerprints)",
                              updated_in_place=True)
    except FileNotFoundError as exc:
        raise UsageError(f"baseline not found: {path}; create it with --baseline-write") from exc
    return set(data["fingerprints"])


def new_findings(findings: list[Finding], known: set[str], path: str) -> list[Finding]:
    """Findings with at least one location not in the baseline at `path`."""
    base = os.path.dirname(os.path.abspath(path))
    return [f for f in findings if not fingerprints(f, base) <= known]
