"""Stop signals in the commands that run many things (`verify`, `bisect`, `history`): one policy. The
first SIGINT, SIGTERM or SIGHUP stops what runs (a run in progress is stopped by the runner's own
handlers, which say so), the command cleans up (worktrees, run folders), keeps and prints what it
measured, and exits 128 + the signal (130, 143)."""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

from ..collect.run.runner import STOP_SIGNALS  # the runner's: a child is stopped on the same signals
from ..outcome import Outcome


class StopRequested(BaseException):
    """A stop signal arrived between two runs (a BaseException: no `except Exception` swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


def stop_signal_of(outcome: dict | None) -> int | None:
    """The stop signal that ended a run (its outcome, as the runner records it), if one did."""
    outcome = outcome or {}
    if Outcome.of(outcome) != Outcome.INTERRUPTED:
        return None
    by = outcome.get("by")
    return signal.Signals[by].value if isinstance(by, str) and by in signal.Signals.__members__ else signal.SIGINT.value


class NoteSignals:
    """While a run is in flight: a stop signal is noted (`received`), the run ends as the runner ends it,
    and the caller stops before the next one."""

    def __init__(self):
        self.received: int | None = None
        self._previous: dict = {}

    def _note(self, signum, frame):
        self.received = signum

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._note)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


@contextmanager
def raise_on_signals():
    """Between runs: a stop signal raises StopRequested where the command is, so its `finally` blocks
    clean up. NoteSignals, entered inside, takes over while a run is in flight and gives it back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise StopRequested(signum)
    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
