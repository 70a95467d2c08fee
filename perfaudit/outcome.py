"""What happened to the audited script: one vocabulary for the child process that records it, the
runner that collects it and the reporters that say it."""
from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    COMPLETED = "completed"              # ran to its end
    WINDOW_COMPLETE = "window_complete"  # perfaudit stopped it after the window (the usual case)
    EXITED = "exited"                    # sys.exit(code)
    OS_EXIT = "os_exit"                  # os._exit(code)
    RAISED = "raised"                    # an exception escaped the script
    INTERRUPTED = "interrupted"          # Ctrl-C, SIGTERM or SIGHUP
    TIMEOUT = "timeout"                  # stopped at --timeout
    CRASHED = "crashed"                  # died without a word (a signal, a segfault)
    SPAWNED = "spawned"                  # handed its training to torch.multiprocessing.spawn
    INTERNAL_ERROR = "internal_error"    # perfaudit's own code failed inside the audited process

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, record: dict | None) -> Outcome | None:
        try:
            return cls((record or {}).get("outcome"))
        except ValueError:
            return None


def is_failure(record: dict | None) -> bool:
    """The script raised, exited non-zero, crashed or timed out."""
    kind = Outcome.of(record)
    if kind in (Outcome.EXITED, Outcome.OS_EXIT):
        return (record or {}).get("exit_code") not in (0, None)
    return kind in (Outcome.RAISED, Outcome.CRASHED, Outcome.TIMEOUT)


def describe(outcome: dict | None) -> str | None:
    """One line saying what happened to the script, or None when the window completed normally."""
    if not outcome:
        return None
    if outcome.get("rank") is not None and outcome.get("failed_ranks"):  # a torchrun job: the rank that failed
        inner = describe({k: v for k, v in outcome.items() if k not in ("rank", "failed_ranks")})
        return f"rank {outcome['rank']}: {inner}" if inner else None
    kind = Outcome.of(outcome)
    steps = outcome.get("steps_recorded")
    seen = f" after {steps} recorded step(s)" if steps is not None else ""
    if kind == Outcome.WINDOW_COMPLETE or outcome.get("outcome") is None:
        after = outcome.get("after_window")
        return describe(after) if after else None
    if kind == Outcome.COMPLETED:
        return f"the script finished{seen}" if steps is not None and steps < outcome.get("warmup", 0) + 1 else None
    if kind == Outcome.EXITED:
        said = f": {outcome['message']}" if outcome.get("message") else ""
        return f"the script exited with code {outcome.get('exit_code')}{seen}{said}"
    if kind == Outcome.OS_EXIT:
        return f"the script called os._exit({outcome.get('exit_code')}){seen}"
    if kind == Outcome.RAISED:
        site = outcome.get("site") or {}
        where = f" at {site.get('path')}:{site.get('line')}" if site.get("path") else ""
        return f"the script raised {outcome.get('exception')}: {outcome.get('message')}{where}{seen}"
    if kind == Outcome.TIMEOUT:
        return f"the script was stopped after the {outcome.get('timeout_s'):g} s timeout{seen}"
    if kind == Outcome.INTERRUPTED:
        by = outcome.get("by")
        return f"the run was stopped{' by ' + by if by and by != 'SIGINT' else ' (Ctrl-C)' if by else ''}{seen}"
    if kind == Outcome.SPAWNED:
        return f"the script started its training in other processes ({outcome.get('api')})"
    if kind == Outcome.INTERNAL_ERROR:
        return (f"perfaudit's own code failed inside the audited process ({outcome.get('exception')}: "
                f"{outcome.get('message')}){seen}; this is a bug in perfaudit, not in the script")
    if kind == Outcome.CRASHED:
        why = outcome.get("signal") or f"exit code {outcome.get('exit_code')}"
        return f"the script crashed ({why}) before perfaudit could save its trace"
    return f"the script ended: {outcome.get('outcome')}"
