"""`perfaudit lint`: what the source alone shows, in milliseconds per file and without importing torch.

Each check (one function in a family module, registered with `@check`) reports under the rule id
whose runtime evidence would confirm it; the rule file gives the severity and the fix. Checks look at
training steps (loop or function bodies that call backward() or .step()) where per-step cost
matters, and skip logging branches (`if step % 100 == 0:`).
"""
from __future__ import annotations

import ast
import os

from ..errors import UsageError
from ..findings import Cost, Finding, Location
from . import copies, data, debug, dist, grads, memory, model, optim, sync  # noqa: F401  (registers checks)
from .registry import CHECKS, Hit, check
from .walk import check_tree

__all__ = ["CHECKS", "Hit", "check", "lint", "lint_source", "python_files"]


def lint_source(text: str, path: str) -> list[Hit]:
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise UsageError(f"syntax error in {path}:{exc.lineno}: {exc.msg}") from exc
    return check_tree(tree)


def python_files(paths: list[str]) -> list[str]:
    out = []
    for path in paths:
        if os.path.isdir(path):
            found = []
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "venv"))
                found += [os.path.join(root, f) for f in sorted(files) if f.endswith(".py")]
            if not found:
                raise UsageError(f"no Python files in folder {path}")
            out += found
        elif os.path.isfile(path):  # a notebook too: its code cells (collect/inprocess/notebook.py)
            out.append(path)
        else:
            raise UsageError(f"not found: {path}")
    return out


def lint(paths: list[str], rules: list, notes: list[str] | None = None, unread: list[str] | None = None) -> list[Finding]:
    """Static findings for the given files or folders, under the rules that are selected. A file that
    cannot be read or parsed is named in `notes` (and listed in `unread`) and the others are still read."""
    spec = {r.id: r for r in rules}
    findings = []
    for path in python_files(paths):
        if path.endswith(".ipynb"):
            findings += _lint_notebook(path, rules, notes, unread)
            continue
        try:
            with open(path, encoding="utf-8-sig", errors="replace") as f:
                text = f.read()
            hits = lint_source(text, path)
        except OSError as exc:
            (notes if notes is not None else []).append(f"skipped {path}: cannot read it ({exc.strerror})")
            (unread if unread is not None else []).append(path)
            continue
        except UsageError as exc:
            (notes if notes is not None else []).append(f"skipped {exc}")
            (unread if unread is not None else []).append(path)
            continue
        lines = text.splitlines()
        shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
        for hit in hits:
            rule = spec.get(hit.rule)
            if rule is None:
                continue
            code = lines[hit.line - 1].strip() if hit.line <= len(lines) else ""
            findings.append(Finding(rule.id, rule.title, tuple(rule.tips), hit.severity or rule.severity, hit.message,
                                    rule.static_fix, Cost(None, None), (Location(shown, hit.line, code, "static"),),
                                    ("static: seen in the source; `perfaudit run` measures it",),
                                    evidence={"static": True}))
    return findings


def _lint_notebook(path: str, rules: list, notes: list[str] | None, unread: list[str] | None) -> list[Finding]:
    """A notebook's code cells read as the script `perfaudit run` would run, the findings put back at
    their cells (`notebook.ipynb[cell N]:line`)."""
    import shutil
    import tempfile

    from ..collect.inprocess.notebook import relocate, write_script
    folder = tempfile.mkdtemp(prefix="perfaudit-nb-")
    try:
        try:
            converted = write_script(path, folder)
        except UsageError as exc:
            (notes if notes is not None else []).append(f"skipped {exc}")
            (unread if unread is not None else []).append(path)
            return []
        return relocate(lint([converted.path], rules, notes, unread), converted)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
