"""The run folder: perfaudit's own, never a folder of the user's files, and not left to grow.

A run folder holds `.perfaudit-run` (its mark), `trace.json.gz`, `result.json`, `script.log` and
`progress.jsonl`. `--out-dir DIR` uses DIR when it is empty, new or an earlier run folder; a folder
holding anything else gets a fresh `perfaudit-run-<time>` folder inside it, so no file of the user's is
ever replaced. The default `.perfaudit/runs/<time>` keeps the newest runs (10 unless configured) and
has a `.gitignore`.
"""
from __future__ import annotations

import os
import shutil
from datetime import datetime

from ..errors import UsageError

MARK = ".perfaudit-run"
OWN_FILES = (MARK, "report.html", "trace.json.gz", "trace.json", "trace.json.tmp", "result.json", "result.json.tmp",
             "script.log", "progress.jsonl", "config.json", "report.html")
DEFAULT_ROOT = os.path.join(".perfaudit", "runs")


def _stamp() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-%f")


def is_run_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, MARK))


def _writable(base: str) -> None:
    try:
        os.makedirs(base, exist_ok=True)
        probe = os.path.join(base, ".write-test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise UsageError(f"cannot write to output folder {base}: {exc.strerror}; pass --out-dir") from exc


def make_run_dir(out_dir: str | None, keep_runs: int = 10) -> str:
    if out_dir is None:
        base = os.path.join(DEFAULT_ROOT, _stamp())
        _writable(base)
        _mark(base)
        _ignore_in_git(os.path.dirname(DEFAULT_ROOT))
        prune_runs(DEFAULT_ROOT, keep_runs, keep=base)
    else:
        base = out_dir
        if os.path.isfile(base):
            raise UsageError(f"cannot write to output folder {base}: it is a file; pass another --out-dir")
        if os.path.isdir(base) and os.listdir(base) and not is_run_dir(base):
            base = os.path.join(base, f"perfaudit-run-{_stamp()}")  # the user's folder: never overwrite
        _writable(base)
        for name in os.listdir(base) if os.path.isdir(base) else ():  # an earlier run here: start clean
            if name in OWN_FILES or (name.startswith("rank") and name.split(".", 1)[-1] in OWN_FILES):
                os.remove(os.path.join(base, name))
    _mark(base)
    return os.path.abspath(base)


def _mark(base: str) -> None:
    with open(os.path.join(base, MARK), "w") as f:
        f.write("perfaudit run folder\n")


def _ignore_in_git(root: str) -> None:
    path = os.path.join(root, ".gitignore")
    if not os.path.exists(path):
        try:
            with open(path, "w") as f:
                f.write("# perfaudit's run folders: traces and logs, not sources\n*\n")
        except OSError:
            pass


def prune_runs(root: str, keep_runs: int, keep: str | None = None) -> None:
    """Remove the oldest run folders under root beyond the newest `keep_runs` (0: keep all)."""
    if keep_runs <= 0 or not os.path.isdir(root):
        return
    runs = sorted((d for d in os.listdir(root) if is_run_dir(os.path.join(root, d))), reverse=True)
    for name in runs[keep_runs:]:
        path = os.path.join(root, name)
        if keep is None or os.path.abspath(path) != os.path.abspath(keep):
            shutil.rmtree(path, ignore_errors=True)


def path_aliases(script: str, alias_dir: str) -> dict[str, str]:
    """ASCII names for a script whose path is not ASCII (the profiler names such frames 'unknown'): a
    link to the script and one to its folder (where its own modules are imported from).
    Returns {alias: real path}."""
    folder = os.path.join(alias_dir, "src")
    os.symlink(os.path.dirname(script), folder)
    name = os.path.basename(script)
    link = os.path.join(alias_dir, name if name.isascii() else "script.py")
    os.symlink(script, link)
    return {link: script, folder: os.path.dirname(script)}


def remove_aliases(alias_dir: str) -> None:
    shutil.rmtree(alias_dir, ignore_errors=True)
