"""Run a user's script in a child process under the profiler window, and collect what it left.

The child runs in its own process session, so a crash, `os._exit`, a hang or Ctrl-C never takes the
auditor down, and every process it started (DataLoader workers included) is killed when it ends.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from ..errors import UsageError
from ..outcome import Outcome, is_failure

GRACE_SECONDS = 20  # how long a signalled child gets to write what it recorded


@dataclass
class RunOptions:
    warmup: int = 2
    steps: int = 5
    full: bool = False
    timeout: float | None = 600.0
    out_dir: str | None = None
    with_stack: bool = True
    record_shapes: bool = True


@dataclass
class RunResult:
    script: str
    run_dir: str
    trace_path: str | None
    outcome: dict                      # what happened to the script (see bootstrap.main)
    log_path: str
    probes: dict = field(default_factory=dict)  # only when no trace was written

    @property
    def failed(self) -> bool:
        """The script raised, exited non-zero, crashed or timed out (in the window or after it)."""
        return is_failure(self.outcome) or is_failure(self.outcome.get("after_window"))

    @property
    def interrupted(self) -> bool:
        return Outcome.of(self.outcome) == Outcome.INTERRUPTED and self.outcome.get("by") == "user"


def _check_script(script: str) -> str:
    if not os.path.exists(script):
        raise UsageError(f"script not found: {script}")
    if os.path.isdir(script):
        raise UsageError(f"{script} is a directory; give the training script's path")
    try:
        with open(script, "rb") as f:
            source = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {script}: {exc.strerror}") from exc
    try:
        compile(source, script, "exec")
    except SyntaxError as exc:
        raise UsageError(f"syntax error in {script}:{exc.lineno}: {exc.msg}; fix it and run again") from exc
    except ValueError as exc:
        raise UsageError(f"cannot compile {script}: {exc}") from exc
    return os.path.abspath(script)


def make_run_dir(out_dir: str | None) -> str:
    base = out_dir or os.path.join(".perfaudit", "runs", datetime.now().strftime("%Y%m%d-%H%M%S-%f"))
    try:
        os.makedirs(base, exist_ok=True)
        probe = os.path.join(base, ".write-test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise UsageError(f"cannot write to output folder {base}: {exc.strerror}; pass --out-dir") from exc
    return os.path.abspath(base)


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_script(script: str, args: list[str], options: RunOptions,
               on_progress: Callable[[dict], None] | None = None) -> RunResult:
    script_path = _check_script(script)
    run_dir = make_run_dir(options.out_dir)
    config = {"run_dir": run_dir, "warmup": options.warmup, "steps": options.steps, "full": options.full,
              "with_stack": options.with_stack, "record_shapes": options.record_shapes}
    config_path = os.path.join(run_dir, "config.json")
    with open(config_path, "w") as f:
        json.dump(config, f)
    log_path = os.path.join(run_dir, "script.log")
    progress_path = os.path.join(run_dir, "progress.jsonl")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "perfaudit.collect.bootstrap", config_path, script, *args]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
    deadline = time.monotonic() + options.timeout if options.timeout else None
    stopped_by = None
    progress_pos = 0
    try:
        while proc.poll() is None:
            if on_progress and os.path.exists(progress_path):
                with open(progress_path) as f:
                    f.seek(progress_pos)
                    for line in f.readlines():
                        if line.endswith("\n"):
                            on_progress(json.loads(line))
                    progress_pos = f.tell()
            if deadline and time.monotonic() > deadline and stopped_by is None:
                stopped_by = "timeout"
                _kill_group(proc.pid, signal.SIGUSR1)  # ask the child to write what it has
                deadline = time.monotonic() + GRACE_SECONDS
            elif stopped_by and time.monotonic() > deadline:
                _kill_group(proc.pid, signal.SIGKILL)
            time.sleep(0.1)
    except KeyboardInterrupt:
        stopped_by = "user"
        _kill_group(proc.pid, signal.SIGUSR1)
        try:
            proc.wait(GRACE_SECONDS)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            pass
    finally:
        if proc.poll() is None:
            _kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
        _kill_group(proc.pid, signal.SIGKILL)  # DataLoader workers or anything else it left behind
    return _collect(script_path, run_dir, log_path, proc.returncode, stopped_by, options)


def _collect(script: str, run_dir: str, log_path: str, returncode: int, stopped_by: str | None,
             options: RunOptions) -> RunResult:
    result_path = os.path.join(run_dir, "result.json")
    result = {}
    if os.path.exists(result_path):
        with open(result_path) as f:
            result = json.load(f)
    outcome = {k: v for k, v in result.items() if k not in ("probes", "trace")}
    if stopped_by == "timeout":
        outcome.update(outcome=Outcome.TIMEOUT, timeout_s=options.timeout)
    elif stopped_by == "user":
        outcome.update(outcome=Outcome.INTERRUPTED, by="user")
    elif not result:
        if returncode is not None and returncode < 0:
            outcome = {"outcome": Outcome.CRASHED, "signal": signal.Signals(-returncode).name}
        else:
            outcome = {"outcome": Outcome.CRASHED, "exit_code": returncode}
    trace = result.get("trace")
    return RunResult(script, run_dir, trace if trace and os.path.exists(trace) else None, outcome,
                     log_path, result.get("probes", {}))
