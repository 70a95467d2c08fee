"""The recording budget's clock: wall time less the time this process waited for a CPU held by
other processes, so a busy machine does not cut the window short.

On Linux, /proc/thread-self/schedstat gives the calling thread's run-queue delay (ns it was runnable
but not running); the main thread's delay is the time other processes took from the training loop.
Elsewhere the clock is the wall clock."""
from __future__ import annotations

import time

_SCHEDSTAT = "/proc/thread-self/schedstat"


def run_queue_wait_s() -> float | None:
    """Seconds the calling thread has waited for a CPU so far, or None where the OS does not say."""
    try:
        with open(_SCHEDSTAT) as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class OwnClock:
    def __init__(self):
        self._wall0 = self._wait0 = None

    def start(self) -> None:
        self._wall0, self._wait0 = time.monotonic(), run_queue_wait_s()

    def waited(self) -> float:
        """Seconds lost to other processes since start()."""
        now = run_queue_wait_s()
        return max(now - self._wait0, 0.0) if now is not None and self._wait0 is not None else 0.0

    def elapsed(self) -> float:
        """Seconds since start(), less those lost to other processes."""
        if self._wall0 is None:
            return 0.0
        return max(time.monotonic() - self._wall0 - self.waited(), 0.0)

    def summary(self) -> dict | None:
        if self._wall0 is None:
            return None
        return {"wall_s": round(time.monotonic() - self._wall0, 3), "waited_for_cpu_s": round(self.waited(), 3)}
