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
        return record.get("exit_code") not in (0, None)
    return kind in (Outcome.RAISED, Outcome.CRASHED, Outcome.TIMEOUT)
