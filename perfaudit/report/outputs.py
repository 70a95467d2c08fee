"""Where a report goes: the formats asked for (`-f FORMAT[=FILE]`, `-o FILE`), checked before anything
runs (a typo must not cost a ten-minute run, and a report never overwrites source code), rendered, and
written each to its file."""
from __future__ import annotations

import os
from importlib import import_module

from ..errors import UsageError, WriteError
from ..files import write_atomic

REPORT_FORMATS = ("console", "json", "sarif", "junit", "markdown", "github", "html")
_SOURCE_SUFFIXES = (".py", ".pyw", ".ipynb", ".pyx")
# format -> (its module in perfaudit.report, whether its renderer takes the rules)
_RENDERERS = {"json": ("json_report", False), "sarif": ("sarif", True), "html": ("html", True),
              "junit": ("junit", True), "markdown": ("markdown", False), "github": ("github", False)}


def parse_formats(formats: list[str] | None, output: str | None) -> list[tuple[str, str | None]]:
    """(format, file or None for standard output) for each `-f`; `-o FILE` gives the first format
    without a file its file (the JSON report when only the console was asked for)."""
    specs: list[tuple[str, str | None]] = []
    for item in formats or ["console"]:
        fmt, _, path = item.partition("=")
        fmt = fmt.strip().lower()
        if fmt not in REPORT_FORMATS:
            raise UsageError(f"unknown format '{fmt}'; choose from {', '.join(REPORT_FORMATS)}")
        if fmt == "console" and path:
            raise UsageError("the console report goes to the terminal; for a file use another format "
                             "(-f markdown=FILE, -f json=FILE)")
        specs.append((fmt, path or None))
    if output:
        for i, (fmt, given) in enumerate(specs):
            if fmt != "console" and given is None:
                specs[i] = (fmt, output)
                break
        else:
            specs.append(("json", output))
    if sum(1 for fmt, path in specs if path is None and fmt != "console") > 1:
        raise UsageError("only one format can go to standard output; give the others a file (FORMAT=FILE)")
    return specs


def _inside(path: str, folder: str) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([real, top]) == top


def check_writable(paths: list[str], protected: tuple[str, ...] = ()) -> None:
    """Every file perfaudit will write can be written, and none is an input of the command (`protected`:
    the audited script, the files linted, the traces read; by the file's identity, whatever its name or
    suffix) or any existing Python file."""
    for path in paths:
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise UsageError(f"cannot write {path}: it is a directory")
        if any(os.path.isfile(p) and os.path.exists(path) and os.path.samefile(p, path) for p in protected):
            raise UsageError(f"refusing to write a report over {path}: it is an input of this command")
        if os.path.isfile(path) and any(os.path.isdir(p) and _inside(path, p) for p in protected):
            raise UsageError(f"refusing to write a report over {path}: it is in a folder this command reads "
                             "(a run folder's report or trace); choose a file outside it")
        if os.path.exists(path) and path.lower().endswith(_SOURCE_SUFFIXES):
            raise UsageError(f"refusing to write a report over {path}: it is Python source; choose another file")
        if not os.path.isdir(folder):
            raise UsageError(f"cannot write {path}: folder {folder} does not exist")
        if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
            raise UsageError(f"cannot write {path}: permission denied")


def render(report, fmt: str, rules) -> str:
    """The report in one format; only that format's renderer is imported (SARIF's rule help pulls in a
    Markdown renderer, HTML jinja2: a JSON report needs neither)."""
    name, with_rules = _RENDERERS[fmt]
    module = import_module(f"{__package__}.{name}")
    return module.render(report, rules) if with_rules else module.render(report)


def write_text(path: str, text: str) -> None:
    """A report file written whole or not at all (files.write_atomic), ending with one newline."""
    write_atomic(path, text.rstrip("\n") + "\n")


def write_files(report, specs: list[tuple[str, str | None]], rules) -> list[str]:
    """Each format that has a file, written; what could not be written, as messages."""
    failed = []
    for fmt, path in specs:
        if path:
            try:
                write_text(path, render(report, fmt, rules))
            except WriteError as exc:
                failed.append(str(exc))
    return failed
