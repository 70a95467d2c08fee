"""`perfaudit history`: a project's step time commit by commit, for CI. Audits the script (or reads a run
folder or trace), appends one JSON line to the history file in the repository (the commit, the step time
and each measured step, the findings, the device) and judges the entry against the recent ones
(verify/history.py): slower beyond their noise, and where the level shifted."""
from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
from collections.abc import Callable
from typing import Annotated, TypedDict

import msgspec

from .. import __version__, untrusted
from ..collect.run.options import RunOptions
from ..engine.loader import Rule, load_rules
from ..errors import UsageError
from ..files import append_line
from ..findings import Report
from ..policy.gate import GateOptions
from ..verify.history import HistoryCheck, check
from ..verify.stats import trimmed_mean
from ..verify.stops import signal_name, stop_signal_of
from .analysis import analyze
from .audit import audit
from .diff import MIN_STEPS, read_side, step_times, unprofiled_times

DEFAULT_FILE = "perfaudit-history.jsonl"


def _git(cwd: str, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def repository(path: str) -> str | None:
    """The git repository holding `path` (a file or folder), if any."""
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    return _git(folder, "rev-parse", "--show-toplevel")


def commit_of(repo: str | None) -> dict:
    """The commit being measured: git's HEAD (and whether the tree has uncommitted changes), else what a
    CI service says (GITHUB_SHA, CI_COMMIT_SHA)."""
    if repo:
        sha = _git(repo, "rev-parse", "HEAD")
        if sha:
            return {"commit": sha, "subject": _git(repo, "log", "-1", "--format=%s") or "",
                    "branch": _git(repo, "rev-parse", "--abbrev-ref", "HEAD"),
                    "dirty": bool(_git(repo, "status", "--porcelain", "--untracked-files=no"))}
    sha = os.environ.get("GITHUB_SHA") or os.environ.get("CI_COMMIT_SHA")
    return {"commit": sha, "subject": "", "branch": os.environ.get("GITHUB_REF_NAME"), "dirty": None}


Milliseconds = Annotated[float, msgspec.Meta(ge=0.0, le=1e12)]  # finite: 1e999 reads as infinity


class _Finding(TypedDict, total=False):
    rule: str
    where: str | None
    code: str


class HistoryEntry(TypedDict, total=False):
    """One line of the history as `entry_of` writes it: what a line committed by anyone must look like to be
    read (a wrong type anywhere skips the line, named)."""
    time: str
    commit: str | None
    subject: str
    branch: str | None
    dirty: bool | None
    script: str | None
    device: str | None
    torch: str | None
    step_ms: Milliseconds | None
    unprofiled_ms: Milliseconds | None
    unprofiled_steps_ms: list[Milliseconds]
    busy: bool
    steps_ms: list[Milliseconds]
    findings: list[_Finding]
    load_avg: float | list[float] | None
    cpu_count: int | None
    run_dir: str | None
    perfaudit: str


READ_LAST = 2000  # entries read from the end: the judgement needs the last `window` of one script's


def read_history(path: str, last: int = READ_LAST) -> tuple[list[dict], list[str]]:
    """The last `last` entries of a history file, oldest first, and a note per line that could not be read
    (skipped, named): the file is read as hostile (perfaudit.untrusted), from its end."""
    entries, notes = untrusted.tail(path, HistoryEntry, last, "a history entry")
    return entries, notes


def _inside_repository(path: str, repo: str) -> None:
    """The history the repository names is the repository's: a committed link that leads out of it (to a
    file of the user's, anywhere) is not followed, for reading or for appending."""
    real, root = os.path.realpath(path), os.path.realpath(repo)
    if real != root and not real.startswith(root + os.sep):
        raise UsageError(f"{path} is a link out of the repository (to {real}); perfaudit does not follow it "
                         "(give --file to keep the history elsewhere)")


def append(path: str, entry: dict) -> None:
    try:
        append_line(path, json.dumps(entry, sort_keys=True))
    except OSError as exc:  # the folder could not be made, or the line not written (the history is as it was)
        raise UsageError(f"{path}: cannot append to the history: {exc.strerror}") from None


def _relative(path: str | None, repo: str | None) -> str | None:
    if not path:
        return path
    base = repo or os.getcwd()
    full = os.path.abspath(path)
    return os.path.relpath(full, base) if full.startswith(os.path.abspath(base) + os.sep) else path


def entry_of(report: Report, script: str, repo: str | None) -> dict:
    """One line of the history: what a CI job needs to see a regression and its cause later."""
    steps = step_times(report)
    plain = unprofiled_times(report)
    trace = report.traces[0] if report.traces else None
    env = (trace.environment if trace else None) or {}
    findings = [{"rule": f.rule, "where": f"{_relative(loc.path, repo)}:{loc.line}" if loc else None,
                 "code": (loc.code or "").strip() if loc else ""}
                for f in report.findings for loc in [f.locations[0] if f.locations else None]]
    return {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **commit_of(repo),
        "script": _relative(script, repo),
        "device": trace.device if trace else None,
        "torch": env.get("torch"),
        # the report's step time: on a busy machine, the steps that did not wait for a CPU (or each step
        # less its wait); else the trimmed mean of the measured steps
        "step_ms": round(trace.step_ms if trace and trace.step_ms else trimmed_mean(steps) * 1000.0, 4)
        if steps else None,
        # the steps timed after the window with nothing recording them, less those a busy machine disturbed:
        # the script's own time, which the history judges once entries have it (verify/history.basis_of)
        "unprofiled_ms": round(statistics.median(plain) * 1000.0, 4) if len(plain) >= MIN_STEPS else None,
        "unprofiled_steps_ms": [round(s * 1000.0, 4) for s in plain],
        # most measured steps waited for a CPU held by other processes: the machine's time, not the code's
        "busy": bool(trace and trace.steps and 2 * trace.busy_measured >= trace.steps),
        "steps_ms": [round(s * 1000.0, 4) for s in steps],
        "findings": findings,
        "load_avg": env.get("load_avg"), "cpu_count": env.get("cpu_count"),
        "run_dir": report.run_dir, "perfaudit": __version__,
    }


def history(target: str, args: list[str], options: RunOptions, path: str | None = None, window: int = 20,
           fail_on_slowdown_pct: float | None = None, write: bool = True, rules: list[Rule] | None = None,
           gate_options: GateOptions | None = None,
           on_event: Callable[[dict], None] | None = None) -> tuple[Report, HistoryCheck, str, list[str]]:
    """Measure `target` (a script, audited now; or a run folder or trace) and judge it against the history
    file (default: perfaudit-history.jsonl at the top of the git repository, else here); append the entry
    unless `write` is false. Returns the report, the judgement, the file and notes about the file."""
    rules = rules if rules is not None else load_rules()
    if not os.path.exists(target):
        raise UsageError(f"{target}: no such script, run folder or trace")
    repo = repository(target)
    if path is None:  # checked before anything is measured
        path = os.path.join(repo or os.getcwd(), DEFAULT_FILE)
        if repo:
            _inside_repository(path, repo)
    if target.endswith(".py") and os.path.isfile(target):
        report = audit(target, args, options, rules, on_event, gate_options)
        script = target
    else:
        report = read_side(target, rules, ()) if os.path.isdir(target) else analyze([target], rules)
        script = report.script or target
        report.run_dir = report.run_dir or (os.path.abspath(target) if os.path.isdir(target) else None)
    entries, notes = read_history(path)
    entry = entry_of(report, script, repo)
    judged = check(entries, entry, window, fail_on_slowdown_pct)
    stopped = stop_signal_of(report.outcome)
    if stopped is not None:  # a stopped run is shown, never kept as a level
        judged.stopped_by = signal_name(stopped)
    if write and judged.stopped_by is None:
        append(path, entry)
    return report, judged, path, notes
