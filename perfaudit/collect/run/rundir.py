"""The run folder: perfaudit's own, never a folder of the user's files, and not left to grow.

A run folder holds `.perfaudit-run` (its mark), `trace.json.gz`, `result.json`, `script.log` and
`progress.jsonl`. `--out-dir DIR` uses DIR when it is empty, new or an earlier run folder; a folder
holding anything else gets a fresh `perfaudit-run-<time>` folder inside it, so no file of the user's is
ever replaced. The default `.perfaudit/runs/<time>` keeps the newest runs (10 unless configured) and
has a `.gitignore`; a folder the user named (`--out-dir`, a run kept for `diff`) is never pruned, even
under that root.
"""
from __future__ import annotations

import os
import shutil
from datetime import datetime

from ...errors import UsageError
from ...files import free_bytes

MARK = ".perfaudit-run"
OWN_FILES = (MARK, "report.html", "trace.json.gz", "trace.json", "trace.json.tmp", "trace.json.gz.tmp", "result.json",
             "result.json.tmp", "script.log", "progress.jsonl", "config.json", "report.json")
DEFAULT_ROOT = os.path.join(".perfaudit", "runs")


def _stamp() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-%f")


def is_run_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, MARK))


MIN_FREE = 16 << 20  # a run folder needs room for a trace: a tiny model's window writes about 1 MB


def _writable(base: str) -> None:
    """The folder can be made and written, with room for a trace: a full disk is said before the script
    runs (a run that finds it full while saving stops and says so too, but under torchrun the ranks
    cannot say which write failed)."""
    try:
        os.makedirs(base, exist_ok=True)
        probe = os.path.join(base, ".write-test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise UsageError(f"cannot write to output folder {base}: {exc.strerror}; pass --out-dir") from exc
    free = free_bytes(base)
    if free is not None and free < MIN_FREE:
        raise UsageError(f"cannot write to output folder {base}: {free >> 10} KB free on its disk, less than a "
                         f"trace needs ({MIN_FREE >> 20} MB); make room or pass another --out-dir")


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
    _mark(base, named=out_dir is not None)
    return os.path.abspath(base)


NAMED = "named by the user"


def _mark(base: str, running: bool = True, named: bool | None = None) -> None:
    """The folder's mark; while a run uses it, with the pid of the perfaudit process that owns it, so
    that pruning never removes a run still going (another run finishing in the same root, say); a
    folder the user named keeps saying so (`named`: None keeps what the mark said)."""
    path = os.path.join(base, MARK)
    if named is None:
        named = _said(path, NAMED)
    with open(path, "w") as f:
        f.write("perfaudit run folder\n" + (f"running pid={os.getpid()}\n" if running else "")
                + (NAMED + "\n" if named else ""))


def _said(mark: str, line: str) -> bool:
    try:
        with open(mark) as f:
            return line in f.read().splitlines()
    except OSError:
        return False


def finish_run_dir(base: str) -> None:
    """The run is over: its folder may be pruned from now on (unless the user named it)."""
    try:
        _mark(base, running=False)
    except OSError:
        pass


def _in_use(path: str) -> bool:
    """Whether a live process still owns this run folder."""
    try:
        with open(os.path.join(path, MARK)) as f:
            text = f.read()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("running pid="):
            try:
                os.kill(int(line.split("=", 1)[1]), 0)
                return True
            except (ValueError, ProcessLookupError):
                return False
            except PermissionError:  # another user's live process
                return True
    return False


def prepare_job_run_dir(run_dir: str, rank: int) -> None:
    """`torchrun -m perfaudit.launch`: the run folder every rank shares is marked (rank 0), kept out of
    git and pruned like `perfaudit run`'s when it is under the default root."""
    os.makedirs(run_dir, exist_ok=True)
    if rank != 0:
        return
    _mark(run_dir)
    root = os.path.dirname(run_dir)
    if os.path.abspath(root) == os.path.abspath(DEFAULT_ROOT):
        _ignore_in_git(os.path.dirname(DEFAULT_ROOT))
        prune_runs(DEFAULT_ROOT, 10, keep=run_dir)


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
    runs = sorted((d for d in os.listdir(root) if is_run_dir(os.path.join(root, d))),
                  key=lambda d: os.path.getmtime(os.path.join(root, d, MARK)), reverse=True)
    for name in runs[keep_runs:]:
        path = os.path.join(root, name)
        if ((keep is None or os.path.abspath(path) != os.path.abspath(keep)) and not _in_use(path)
                and not _said(os.path.join(path, MARK), NAMED)):
            shutil.rmtree(path, ignore_errors=True)


def path_aliases(script: str, alias_dir: str) -> dict[str, str]:
    """ASCII names for a script whose path is not ASCII (the profiler names such frames 'unknown'): a
    link to the script and one to its folder (where its own modules are imported from).
    Returns {alias: real path}."""
    folder = os.path.join(alias_dir, "src")
    os.symlink(os.path.dirname(script), folder)
    name = os.path.basename(script)
    link = os.path.join(alias_dir, name if name.isascii() and name.isprintable() else "script.py")
    os.symlink(script, link)
    return {link: script, folder: os.path.dirname(script)}


def remove_aliases(alias_dir: str) -> None:
    shutil.rmtree(alias_dir, ignore_errors=True)
