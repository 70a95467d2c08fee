"""From findings to edited sources: which files to touch, the edits per file, the diff, the write.

A file is edited only when it is the user's (under the project root, not in site-packages), parses,
and still holds, at each located line, the code the run saw there. Every finding with an automatic
fix either becomes an edit or is listed with the reason it did not."""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field

import libcst as cst

from ..findings import Finding
from .catalog import FIX_KINDS
from .edits import EDITS


@dataclass
class Change:
    rule: str
    path: str
    line: int
    what: str
    kind: str = ""    # the fix kind (catalog.FIX_KINDS)


@dataclass
class NotFixed:
    rule: str
    where: str        # "path:line", or "" when the finding has no location
    reason: str


@dataclass
class FileFix:
    path: str         # absolute
    shown: str        # as the findings showed it
    original: str
    fixed: str

    def diff(self) -> str:
        return "".join(difflib.unified_diff(self.original.splitlines(keepends=True), self.fixed.splitlines(keepends=True),
                                            f"a/{self.shown}", f"b/{self.shown}"))


@dataclass
class FixPlan:
    files: list[FileFix] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    not_fixed: list[NotFixed] = field(default_factory=list)

    @property
    def rules(self) -> list[str]:
        return sorted({c.rule for c in self.changes})

    def diff(self) -> str:
        return "".join(f.diff() for f in self.files)

    def sources(self) -> dict[str, str]:
        """Absolute path → fixed source, for `verify` to serve without touching the files."""
        return {f.path: f.fixed for f in self.files}

    def write(self) -> list[str]:
        written = []
        for f in self.files:
            tmp = f.path + ".perfaudit-tmp"
            with open(tmp, "w", encoding="utf-8", newline="") as out:
                out.write(f.fixed)
            os.replace(tmp, f.path)   # atomic: an interrupted write never leaves half a file
            written.append(f.shown)
        return written


def _is_users(path: str, root: str) -> str | None:
    """Why the file must not be edited, or None."""
    real = os.path.realpath(path)
    if "site-packages" in real.split(os.sep) or "dist-packages" in real.split(os.sep):
        return "an installed package, not your code"
    if os.path.commonpath([real, os.path.realpath(root)]) != os.path.realpath(root):
        return f"outside the project ({root})"
    if not os.path.isfile(real):
        return "the file is not there any more"
    return None


def plan_fixes(findings: list[Finding], root: str, select: set[str] | None = None,
               base_dir: str | None = None) -> FixPlan:
    """The edits for every finding with an automatic fix (of the selected rules). Findings seen in the
    source only are not fixed: the run did not show them costing anything."""
    plan = FixPlan()
    per_file: dict[str, list[tuple[Finding, set[int], str]]] = {}
    for f in findings:
        if f.autofix is None or (select and f.rule not in select):
            continue
        if f.evidence.get("origin") == "static" or f.evidence.get("static"):
            plan.not_fixed.append(NotFixed(f.rule, _where(f), "seen in the source only: the run did not measure it"))
            continue
        if not f.locations:
            plan.not_fixed.append(NotFixed(f.rule, "", "the finding has no line in your code to edit"))
            continue
        for loc in f.locations:
            path = _absolute(loc.path, base_dir)
            entry = next((e for e in per_file.setdefault(path, []) if e[0] is f), None)
            if entry is None:
                per_file[path].append((f, {loc.line}, loc.path))
            else:
                entry[1].add(loc.line)
        if f.autofix["kind"] == "pin_memory":  # the DataLoader too, which may be in another file
            _add_loader(f, per_file, base_dir)
    for path, entries in per_file.items():
        _plan_file(plan, path, entries, root, base_dir)
    plan.changes.sort(key=lambda c: (c.path, c.line))
    return plan


def _add_loader(f: Finding, per_file: dict, base_dir: str | None) -> None:
    params = f.autofix.get("params") or {}
    if params.get("loader_path") and isinstance(params.get("loader_line"), int):
        path = _absolute(params["loader_path"], base_dir)
        if not any(e[0] is f for e in per_file.get(path, [])):
            per_file.setdefault(path, []).append((f, set(), params["loader_path"]))


def _absolute(path: str, base_dir: str | None) -> str:
    if os.path.isabs(path):
        return path
    here = os.path.abspath(path)
    if os.path.exists(here) or base_dir is None:
        return here
    return os.path.join(base_dir, path)


def _where(f: Finding) -> str:
    return f"{f.location.path}:{f.location.line}" if f.location else ""


def _plan_file(plan: FixPlan, path: str, entries: list, root: str, base_dir: str | None) -> None:
    shown = entries[0][2]
    refusal = _is_users(path, root)
    if refusal is None:
        try:
            with open(path, encoding="utf-8") as src:
                original = src.read()
            module = cst.parse_module(original)
        except (OSError, UnicodeDecodeError) as exc:
            refusal = f"cannot read it ({exc})"
        except cst.ParserSyntaxError:
            refusal = "it does not parse"
    if refusal is None:
        stale = _stale_lines(original, entries)
        if stale:
            refusal = f"it changed since the run (line {stale[0]} no longer holds the code the run saw)"
    if refusal is not None:
        for f, lines, _ in entries:
            plan.not_fixed.append(NotFixed(f.rule, f"{shown}:{min(lines) if lines else ''}", refusal))
        return
    fixed_module = module
    # bottom of the file first: an edit that adds or removes a line moves only the lines below it
    loader_lines = {id(f): (f.autofix.get("params") or {}).get("loader_line") for f, _, _ in entries}
    entries = sorted(entries, key=lambda e: -max(e[1] | {loader_lines[id(e[0])] or 0}))
    for f, lines, _ in entries:
        params = dict(f.autofix.get("params") or {})
        if f.autofix["kind"] == "pin_memory" and params.get("loader_path"):
            params["loader_here"] = os.path.realpath(_absolute(params["loader_path"], base_dir)) == os.path.realpath(path)
        transformer = EDITS[f.autofix["kind"]](lines, params)
        fixed_module = cst.MetadataWrapper(fixed_module).visit(transformer)
        for line, what in transformer.outcome.changed:
            plan.changes.append(Change(f.rule, shown, line, what, f.autofix["kind"]))
        for line, why in transformer.outcome.refused:
            plan.not_fixed.append(NotFixed(f.rule, f"{shown}:{line}", why))
        if not transformer.outcome.changed and not transformer.outcome.refused:
            plan.not_fixed.append(NotFixed(f.rule, f"{shown}:{min(lines) if lines else ''}",
                                           f"no {FIX_KINDS[f.autofix['kind']].description.split(';')[0]} "
                                           "form at that line to change mechanically"))
    if fixed_module.code != original:
        plan.files.append(FileFix(path, shown, original, fixed_module.code))


def _stale_lines(source: str, entries: list) -> list[int]:
    lines = source.splitlines()
    stale = []
    for f, wanted, _ in entries:
        for loc in f.locations:
            if loc.line in wanted and loc.code and (loc.line > len(lines) or
                                                     loc.code.strip()[:60] not in lines[loc.line - 1]):
                stale.append(loc.line)
    return stale
