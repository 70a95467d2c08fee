"""From findings to edited sources: which files to touch, the edits per file, the diff, the write.

A file is edited only when it is the user's (under the project root, not in site-packages), parses,
and still holds, at each located line, the code the run saw there. Every finding with an automatic
fix either becomes an edit or is listed with the reason it did not."""
from __future__ import annotations

import codecs
import difflib
import errno
import os
import stat
import tempfile
from dataclasses import dataclass, field

import libcst as cst

from ..files import remove_if_there
from ..files import why as write_failure
from ..findings import Finding
from .catalog import FIX_KINDS
from .cst import BlockTransformer
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
    path: str         # absolute (a symbolic link resolved: the file it points to is edited)
    shown: str        # the path the diff names (_shown: the repository's root, or the working directory)
    original: str     # the text as it is on disk: line endings untouched, without a UTF-8 BOM
    fixed: str
    bom: bool = False  # the file starts with a UTF-8 byte-order mark, kept on write

    def diff(self) -> str:
        """A unified diff that `git apply` and `patch -p1` take from the project root: the file's own
        line endings, and the "no newline at end of file" marker where the last line has none."""
        lines = difflib.unified_diff(self.original.splitlines(keepends=True), self.fixed.splitlines(keepends=True),
                                     f"a/{self.shown}", f"b/{self.shown}")
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)

    def encoded(self) -> bytes:
        return (codecs.BOM_UTF8 if self.bom else b"") + self.fixed.encode("utf-8")


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
        """Every file edited, or none: each is written in place (same inode, so its mode, owner, hard
        links and the symbolic links to it stay), after a copy of the original is kept beside it under a
        name no other file has, synced to the disk; each write is synced too. If any write fails (a full
        disk), the files already touched are put back and the error is raised; a file that cannot be put
        back keeps its copy, and the error names it. The copies are removed only once every file is
        either written or back as it was."""
        from ..errors import UsageError
        backups: dict[str, str] = {}
        touched: list[FileFix] = []
        try:
            for f in self.files:
                if not os.access(f.path, os.W_OK):
                    raise OSError(errno.EACCES, f"{f.shown}: permission denied")
                fd, backup = tempfile.mkstemp(prefix=f".{os.path.basename(f.path)}.", suffix=".perfaudit-backup",
                                              dir=os.path.dirname(f.path))
                backups[f.path] = backup
                with os.fdopen(fd, "wb") as out:
                    out.write(_original_bytes(f))
                    out.flush()
                    os.fsync(out.fileno())
            for f in self.files:  # a file that cannot even be opened was not touched
                _write_in_place(f.path, f.encoded(), opened=lambda f=f: touched.append(f))
        except OSError as exc:
            kept = _put_back(touched, backups)
            for path in set(backups) - set(kept):
                remove_if_there(backups[path])
            if kept:
                names = "; ".join(f"{f.shown}: its original is in {backups[f.path]}" for f in touched if f.path in kept)
                raise UsageError(f"--write failed ({write_failure(exc)}) and could not put everything back: {names}") from None
            raise UsageError(f"--write: nothing was changed: {write_failure(exc)}") from None
        for backup in backups.values():
            remove_if_there(backup)
        return [f.shown for f in self.files]


def _original_bytes(f: FileFix) -> bytes:
    return (codecs.BOM_UTF8 if f.bom else b"") + f.original.encode("utf-8")


def _write_in_place(path: str, data: bytes, opened=lambda: None) -> None:
    with open(path, "r+b") as out:
        opened()
        out.write(data)
        out.truncate()
        out.flush()
        os.fsync(out.fileno())


def _put_back(touched: list[FileFix], backups: dict[str, str]) -> set[str]:
    """The touched files rewritten with their original bytes; the paths that could not be."""
    kept = set()
    for f in touched:
        try:
            _write_in_place(f.path, _original_bytes(f))
        except OSError:
            kept.add(f.path)
    return kept


def _is_users(path: str, root: str) -> str | None:
    """Why the file must not be edited, or None."""
    real = os.path.realpath(path)
    try:
        mode = os.stat(real).st_mode
    except OSError:
        return "the file is not there any more"
    if not stat.S_ISREG(mode):
        return "not a regular file"
    if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        return "the file is read-only (its mode says so): left as it is"
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
    params = (f.autofix or {}).get("params") or {}
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


def _shown(path: str, root: str) -> str:
    """The name a diff gives a file: relative to the repository's root in a git repository (`git apply`
    anywhere in it), else to the working directory when the file is under it (`patch -p1` or `git apply`
    where the command ran), else to the project root."""
    base = os.path.realpath(root)
    here = os.path.realpath(os.getcwd())
    if not os.path.exists(os.path.join(base, ".git")) and os.path.commonpath([path, here]) == here:
        base = here
    return os.path.relpath(path, base).replace(os.sep, "/")


def _where(f: Finding) -> str:
    return f"{f.location.path}:{f.location.line}" if f.location else ""


def _plan_file(plan: FixPlan, path: str, entries: list, root: str, base_dir: str | None) -> None:
    shown = entries[0][2]
    refusal = _is_users(path, root)
    bom = False
    if refusal is None:
        path = os.path.realpath(path)  # a link: the file it points to is the one edited
        shown = _shown(path, root)
        try:
            with open(path, "rb") as src:
                raw = src.read()
            bom = raw.startswith(codecs.BOM_UTF8)
            original = raw[len(codecs.BOM_UTF8) if bom else 0:].decode("utf-8")  # line endings as they are
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
    # bottom of the file first: an edit that adds or removes a line moves only the lines below it; on the same
    # line, the edits within it before one that puts a statement above it (which would move the line)
    loader_lines = {id(f): (f.autofix.get("params") or {}).get("loader_line") for f, _, _ in entries}
    entries = sorted(entries, key=lambda e: (-max(e[1] | {loader_lines[id(e[0])] or 0}),
                                             issubclass(EDITS[e[0].autofix["kind"]], BlockTransformer)))
    for f, lines, _ in entries:
        params = dict(f.autofix.get("params") or {}, _source=original, _path=os.path.realpath(path))
        if f.autofix["kind"] == "pin_memory" and params.get("loader_path"):
            params["loader_here"] = os.path.realpath(_absolute(params["loader_path"], base_dir)) == os.path.realpath(path)
        transformer = EDITS[f.autofix["kind"]](lines, params)
        fixed_module = cst.MetadataWrapper(fixed_module).visit(transformer)
        for line, what in transformer.outcome.changed:
            plan.changes.append(Change(f.rule, shown, line, what, f.autofix["kind"]))
        for line, why in transformer.outcome.refused:
            plan.not_fixed.append(NotFixed(f.rule, f"{shown}:{line}", why))
        if not transformer.outcome.changed and not transformer.outcome.refused:
            looks_for = FIX_KINDS[f.autofix["kind"]].looks_for or "the code its edit changes"
            plan.not_fixed.append(NotFixed(f.rule, f"{shown}:{min(lines) if lines else ''}",
                                           f"nothing at that line for this fix to change mechanically (it edits "
                                           f"{looks_for}); `perfaudit explain {f.rule}` shows the change to make "
                                           "by hand"))
    if fixed_module.code != original:
        plan.files.append(FileFix(path, shown, original, fixed_module.code, bom))


def _stale_lines(source: str, entries: list) -> list[int]:
    lines = source.splitlines()
    stale = []
    for f, wanted, _ in entries:
        for loc in f.locations:
            if loc.line in wanted and loc.code and (loc.line > len(lines) or
                                                     loc.code.strip()[:60] not in lines[loc.line - 1]):
                stale.append(loc.line)
    return stale
