"""Run a user's script in a child process under the profiler window, and collect what it left.

The child runs in its own process session, so a crash, `os._exit`, a hang or Ctrl-C never takes the
auditor down, and every process it started (DataLoader workers included) is killed when it ends.
SIGINT, SIGTERM and SIGHUP sent to perfaudit all stop the script the same way: it is asked to write
what it recorded, given a grace period, then killed; what is on disk then is reported. If perfaudit
itself is killed, the child notices its parent is gone and stops on its own.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from ...files import write_failure_of
from ...outcome import Outcome, is_failure
from .emulated_failure import GPU_PATH_KEYS, emulation_failure, gpu_path_error, same_failure
from .leftovers import phase_reached, progress_record, salvage_trace
from .options import RunOptions, RunResult
from .processes import become_subreaper, kill_group, kill_orphans, own_children, signal_run
from .rundir import finish_run_dir, make_run_dir, path_aliases, remove_aliases

GRACE_SECONDS = 20          # how long a signalled child gets to write what it recorded
LOG_HEAD = LOG_TAIL = 1 << 20  # script.log keeps the first and the last MiB of the script's output
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(Exception):
    """perfaudit was asked to stop (SIGINT, SIGTERM, SIGHUP) while the script ran."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def check_script(script: str) -> str:
    from ...errors import UsageError
    if not os.path.exists(script):
        raise UsageError(f"script not found: {script}")
    if os.path.isdir(script):
        raise UsageError(f"{script} is a directory; give the training script's path")
    if script.endswith(".ipynb"):  # its code cells as one script, checked as such
        from ..inprocess.notebook import check_notebook
        return check_notebook(script, _compile)
    try:
        with open(script, "rb") as f:
            source = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {script}: {exc.strerror}") from exc
    _compile(source, script, lambda line: f"{script}:{line}")
    return os.path.abspath(script)


def _compile(source: bytes, script: str, where) -> None:
    from ...errors import UsageError
    try:
        compile(source, script, "exec")
    except SyntaxError as exc:
        raise UsageError(f"syntax error in {where(exc.lineno or 0)}: {exc.msg}; fix it and run again") from exc
    except ValueError as exc:
        raise UsageError(f"cannot compile {script}: {exc}") from exc


def _copy_capped(source, log_path: str) -> None:
    """The script's output into script.log: all of it up to LOG_HEAD + LOG_TAIL bytes, else the head
    and the tail with a line saying how much was left out. When the log cannot be written (a full disk)
    the output is still read to its end: a pipe left full would block the script."""
    try:
        _copy_capped_to(source, log_path)
    except OSError:
        for _ in iter(lambda: source.read1(1 << 16), b""):
            pass


def _copy_capped_to(source, log_path: str) -> None:
    head, tail, dropped = bytearray(), bytearray(), 0
    with open(log_path, "wb") as log:
        for chunk in iter(lambda: source.read1(1 << 16), b""):
            if len(head) < LOG_HEAD:
                take = chunk[:LOG_HEAD - len(head)]
                head += take
                log.write(take)
                log.flush()
                chunk = chunk[len(take):]
            if chunk:
                tail += chunk
                if len(tail) > LOG_TAIL:
                    dropped += len(tail) - LOG_TAIL
                    del tail[:len(tail) - LOG_TAIL]
        if dropped:
            log.write(f"\n[perfaudit: {dropped} bytes of output left out here]\n".encode())
        log.write(tail)


def run_script(script: str, args: list[str], options: RunOptions,
               on_progress: Callable[[dict], None] | None = None) -> RunResult:
    """The script run once under the profiler window (or timed, for verify). When the process died
    while torch stopped the profiler (a SIGSEGV inside torch, seen about 1 run in 15 on a busy machine),
    the recorded window is lost: the script runs once more, and the report says why."""
    result = _run_once(script, args, options, on_progress)
    died = result.outcome.get("died_exporting")
    if died and result.stop_signal is None and not options.launch:
        again = _run_once(script, args, options, on_progress)
        again.outcome["retried"] = f"the first run died ({died}) inside torch while its profiler stopped"
        result = again
    failed = emulation_failure(result, options)
    if failed:  # the emulated CUDA path broke the run: the script runs as it would here, and the report says why
        if on_progress is not None:
            on_progress({"phase": "cpu_branch", "why": "the emulated CUDA device could not serve it"})
        plain = run_script(script, args, replace(options, device="cpu"), on_progress)
        if same_failure(result.outcome, plain.outcome):
            return result  # the script's own error: it fails the same way on its CPU path
        plain.emulation_failed = failed
        return plain
    return result


def with_cpu_branch(result: RunResult, script: str, args: list[str], options: RunOptions,
                    on_progress: Callable[[dict], None] | None = None) -> RunResult:
    """An audit's run whose CUDA path raised the script's own error before its window (gpu_path_error): the
    script runs again on its CPU path, whose report is what was measured, and the CUDA path's error goes
    with it (its outcome's `gpu_path`). When the CPU path measures no step either (it fails the same way, or
    a CUDA-only script fails at its first CUDA call), the first run stands."""
    if not gpu_path_error(result, options):
        return result
    if on_progress is not None:
        site = result.outcome.get("site") or {}
        on_progress({"phase": "cpu_branch", "why": f"its CUDA path raised {result.outcome.get('exception')}"
                     + (f" at line {site['line']}" if site.get("line") else "")})
    plain = run_script(script, args, replace(options, device="cpu"), on_progress)
    if plain.stop_signal is None and (plain.outcome.get("steps_recorded") or 0) <= (plain.outcome.get("warmup") or 0):
        return result
    plain.outcome["gpu_path"] = {k: result.outcome[k] for k in GPU_PATH_KEYS if k in result.outcome}
    return plain


def _run_once(script: str, args: list[str], options: RunOptions,
              on_progress: Callable[[dict], None] | None) -> RunResult:
    script_path = check_script(script)
    run_dir = make_run_dir(options.out_dir, options.keep_runs)
    # the profiler mangles frames of paths that are not plain ASCII (non-ASCII letters, a newline): an alias
    alias_dir = tempfile.mkdtemp(prefix="perfaudit-src-") if not (script_path.isascii() and script_path.isprintable()) else None
    aliases = path_aliases(script_path, alias_dir) if alias_dir else {}
    config = {"run_dir": run_dir, "warmup": options.warmup, "steps": options.steps, "full": options.full,
              "with_stack": options.with_stack, "record_shapes": options.record_shapes,
              "record_budget_s": options.record_budget_s, "trace_budget_mb": options.trace_budget_mb,
              "keep_stacks": options.keep_stacks,
              "path_aliases": aliases, "mode": options.mode, "seed": options.seed, "patched": options.patched,
              "run_as": next((a for a, real in aliases.items() if real == script_path), None),
              "rule_ids": options.rule_ids, "rules_dirs": options.rules_dirs, "threads": options.threads,
              "watch": options.watch, "init_draws": options.init_draws, "device": options.device,
              "emulated_gpu": options.emulated_gpu, "target": options.target,
              "min_measure_s": options.min_measure_s, "import_dir": options.import_dir,
              "batch_scale": options.batch_scale, "checkpoint_classes": options.checkpoint_classes,
              "checkpoint_first": options.checkpoint_first,
              "source_roots": [os.path.dirname(script_path), options.cwd or os.getcwd()]}
    log_path = os.path.join(run_dir, "script.log")
    progress_path = os.path.join(run_dir, "rank0.progress.jsonl" if options.launch else "progress.jsonl")
    env = dict(os.environ, PYTHONUNBUFFERED="1", PERFAUDIT_CONFIG=json.dumps(config))
    if options.seed is not None:
        env["PYTHONHASHSEED"] = str(options.seed)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["perfaudit"].__file__ or "")))  # beside perfaudit/
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    if options.cwd:  # the script as named is relative to the caller's folder, not the one it runs in
        script = script_path
    cmd = [sys.executable, "-m", "perfaudit.child", script, *args]
    if options.launch:  # PyTorch's own launcher starts the ranks; each runs perfaudit.child
        cmd = [sys.executable, "-m", "torch.distributed.run", *options.launch, "-m", "perfaudit.child",
               script, *args]
    reaping = become_subreaper()
    before = own_children() if reaping else set()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=env, cwd=options.cwd)
    logger = threading.Thread(target=_copy_capped, args=(proc.stdout, log_path), daemon=True)
    logger.start()
    try:
        stop_signal, timed_out = _supervise(proc, options, progress_path, on_progress)
    finally:
        if reaping:
            kill_orphans(before)
        finish_run_dir(run_dir)
    logger.join(5)
    if alias_dir:
        remove_aliases(alias_dir)
    if options.launch:
        result = _collect_ranks(script_path, run_dir, log_path, proc.returncode, stop_signal, timed_out, options)
    else:
        result = _collect(script_path, run_dir, log_path, proc.returncode, stop_signal, timed_out, options)
    site = result.outcome.get("site")
    for alias, real in aliases.items():  # an exception's line, as the user knows the file
        if isinstance(site, dict) and str(site.get("path", "")).startswith(alias):
            site["path"] = real + site["path"][len(alias):]
    return result


def _supervise(proc, options: RunOptions, progress_path: str, on_progress) -> tuple[int | None, bool]:
    """Wait for the child, relaying progress; stop it on timeout or on a stop signal to perfaudit.
    Returns (the signal that stopped perfaudit, whether the timeout did)."""
    def on_stop(signum, frame):
        raise Stopped(signum)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN or sig != signal.SIGINT:
                previous[sig] = signal.signal(sig, on_stop)
    deadline = time.monotonic() + options.timeout if options.timeout else None
    stop_signal, timed_out, asked = None, False, False
    launched = bool(options.launch)
    progress_pos, last_tick = 0, time.monotonic()
    try:
        while proc.poll() is None:
            try:
                if on_progress and time.monotonic() - last_tick >= 1.0:  # a clock for the progress line
                    last_tick = time.monotonic()
                    on_progress({"phase": "tick"})
                if on_progress and os.path.exists(progress_path):
                    with open(progress_path) as f:
                        f.seek(progress_pos)
                        for line in f.readlines():
                            if line.endswith("\n"):
                                on_progress(json.loads(line))
                                progress_pos += len(line.encode())
                if deadline and time.monotonic() > deadline:
                    if not asked:
                        timed_out = asked = True
                        signal_run(proc, launched, signal.SIGUSR1)  # ask the child to write what it has
                        deadline = time.monotonic() + GRACE_SECONDS
                    else:
                        signal_run(proc, launched, signal.SIGKILL)
                time.sleep(0.1)
            except (Stopped, KeyboardInterrupt) as exc:
                signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
                if stop_signal is not None:  # a second signal: stop waiting
                    signal_run(proc, launched, signal.SIGKILL)
                    continue
                stop_signal, asked = signum, True
                signal_run(proc, launched, signal.SIGUSR1)
                deadline = time.monotonic() + GRACE_SECONDS
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if proc.poll() is None:
            signal_run(proc, launched, signal.SIGKILL)
            proc.wait()
        kill_group(proc.pid, signal.SIGKILL)  # DataLoader workers or anything else it left behind
    return stop_signal, timed_out


def _collect(script: str, run_dir: str, log_path: str, returncode: int, stop_signal: int | None,
             timed_out: bool, options: RunOptions) -> RunResult:
    salvage_trace(run_dir)
    result_path = os.path.join(run_dir, "result.json")
    result = {}
    if os.path.exists(result_path):
        try:
            with open(result_path) as f:
                result = json.load(f)
        except ValueError:
            result = {}
    outcome = {k: v for k, v in result.items() if k not in ("probes", "trace", "timing")} or progress_record(run_dir)
    after_window = phase_reached(run_dir, "timing_plain") and not phase_reached(run_dir, "done")
    if timed_out and after_window:  # the window was saved; a step timed after it ran past --timeout
        outcome["died_after_window"] = f"stopped at --timeout {options.timeout or 0:g} s"
    elif timed_out:
        outcome.update(outcome=Outcome.TIMEOUT, timeout_s=options.timeout)
    elif stop_signal is not None:
        outcome.update(outcome=Outcome.INTERRUPTED, by=signal.Signals(stop_signal).name)
    elif write_failure_of(returncode):  # the child could not write the run folder: it stopped, and says why
        outcome["write_error"] = f"cannot write the run folder {run_dir}: {write_failure_of(returncode)}"
    elif not result:
        if returncode is not None and returncode < 0:
            outcome.update(outcome=Outcome.CRASHED, signal=signal.Signals(-returncode).name)
        else:
            outcome.update(outcome=Outcome.CRASHED, exit_code=returncode)
    elif returncode and phase_reached(run_dir, "counting_flops") and not phase_reached(run_dir, "done"):
        # the window was saved; the process died in the FLOP count after it (the report counts from shapes)
        outcome["died_counting"] = signal.Signals(-returncode).name if returncode < 0 else f"exit code {returncode}"
    elif returncode and after_window:
        # the window was saved; the process died in the steps timed after it (the report keeps the recorded wait)
        outcome["died_after_window"] = signal.Signals(-returncode).name if returncode < 0 else f"exit code {returncode}"
    elif returncode and phase_reached(run_dir, "exporting") and not phase_reached(run_dir, "done"):
        # the window was recorded, then the process died writing it: the report must say so
        outcome["died_exporting"] = signal.Signals(-returncode).name if returncode < 0 else f"exit code {returncode}"
    trace = result.get("trace") or next((p for p in (os.path.join(run_dir, "trace.json.gz"),
                                                     os.path.join(run_dir, "trace.json")) if os.path.exists(p)), "")
    return RunResult(script, run_dir, trace if os.path.exists(trace) else None, outcome,
                     log_path, result.get("probes", {}), timing=result.get("timing"), stop_signal=stop_signal)


_RANK_FILE = re.compile(r"rank(\d+)\.progress\.jsonl$")
_FINE = (Outcome.WINDOW_COMPLETE, Outcome.COMPLETED)


_FAILED_RANK = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank[^)]*\)\s*exitcode\s*:\s*(-?\d+)[^\n]*?(?:\((SIG\w+)\))?\s*$",
                          re.M)


def _torchrun_failures(log_path: str) -> tuple[int | None, dict[int, dict]]:
    """What torchrun printed when workers failed: the rank it calls the root cause (the first observed
    failure), and how each failed rank ended (an exit code, or the signal that killed it)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(os.path.getsize(log_path) - (64 << 10), 0))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None, {}
    ended = {}
    for m in _FAILED_RANK.finditer(text):
        code = int(m.group(2))
        ended[int(m.group(1))] = ({"signal": m.group(3) or signal.Signals(-code).name} if code < 0 or m.group(3)
                                  else {"exit_code": code})
    _, _, after = text.rpartition("Root Cause")
    root = _FAILED_RANK.search(after)
    return (int(root.group(1)) if root else None), ended


def _ended_at(outcome: dict) -> float:
    at = outcome.get("at")
    return at if isinstance(at, (int, float)) else float("inf")


def _collect_ranks(script: str, run_dir: str, log_path: str, returncode: int, stop_signal: int | None,
                   timed_out: bool, options: RunOptions) -> RunResult:
    """Every rank that started (it wrote rank<R>.progress.jsonl): its outcome and its trace. The job's
    outcome is the first failed rank's (named), else rank 0's; ranks that never reached the window
    are named too."""
    ranks = sorted(int(m.group(1)) for m in map(_RANK_FILE.match, os.listdir(run_dir)) if m)
    outcomes, traces = {}, []
    for rank in ranks:
        prefix = f"rank{rank}."
        salvage_trace(run_dir, prefix)
        record = {}
        try:
            with open(os.path.join(run_dir, prefix + "result.json")) as f:
                record = json.load(f)
        except (OSError, ValueError):
            pass
        outcome = {k: v for k, v in record.items() if k not in ("probes", "trace", "timing")}
        if not outcome:  # killed before it could write: what its progress file says it reached
            outcome = {**progress_record(run_dir, prefix), "outcome": Outcome.CRASHED,
                       "exit_code": returncode}
        outcomes[rank] = {**outcome, "rank": rank}
        trace = os.path.join(run_dir, prefix + "trace.json.gz")
        if os.path.exists(trace):
            traces.append(trace)
    root, ended = _torchrun_failures(log_path)  # torchrun names the first rank that failed, and how
    for rank, how in ended.items():
        if rank in outcomes and Outcome.of(outcomes[rank]) in (Outcome.CRASHED, None):
            outcomes[rank] = {k: v for k, v in outcomes[rank].items() if k not in ("exit_code", "signal")}
            outcomes[rank].update(how, outcome=Outcome.CRASHED)
    failed = [r for r in ranks if Outcome.of(outcomes[r]) not in _FINE]
    # the rank that failed first, as torchrun saw it, then ranks that failed on their own, then the
    # ranks stopped because of them (a broken connection, the launcher's SIGTERM)
    failed.sort(key=lambda r: (r != root, not is_failure(outcomes[r]), _ended_at(outcomes[r]), r))
    if not ranks:
        job = {"outcome": Outcome.CRASHED, "exit_code": returncode, "detail": "no rank started (rendezvous or "
               "launcher failure: script.log has torchrun's message)"}
    else:
        job = dict(outcomes[failed[0]] if failed else outcomes[ranks[0]])
    job["ranks"] = {str(r): str(outcomes[r].get("outcome")) for r in ranks}
    job["failed_ranks"] = failed
    job["unmeasured_ranks"] = [r for r in ranks if not outcomes[r].get("profiling_started")
                               or (outcomes[r].get("steps_recorded") or 0) <= (outcomes[r].get("warmup") or 0)]
    if timed_out:
        job.update(outcome=Outcome.TIMEOUT, timeout_s=options.timeout)
    elif stop_signal is not None:
        job.update(outcome=Outcome.INTERRUPTED, by=signal.Signals(stop_signal).name)
    return RunResult(script, run_dir, traces[0] if traces else None, job, log_path,
                     stop_signal=stop_signal, rank_traces=traces, rank_outcomes=outcomes)
