"""Time lost to other processes: how long this process's threads waited for a CPU.

On Linux, /proc/self/task/<tid>/schedstat gives each thread's run-queue delay (ns it was runnable
but not running). Their sum over a step says whether other processes disturbed it: a thread of the
intra-op pool left waiting holds up the whole parallel op, so one preempted thread can stretch a
step many times over. The recording budget's clock counts wall time less that wait, so a busy
machine does not cut the window short. Elsewhere (macOS) nothing is known: the wait is 0."""
from __future__ import annotations

import os
import time

_TASKS = "/proc/self/task"


def run_queue_wait_s() -> float | None:
    """Seconds this process's threads have waited for a CPU so far (summed), or None where the OS
    does not say."""
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return None
    total = 0
    for tid in tids:
        try:
            with open(f"{_TASKS}/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[1])
        except (OSError, ValueError, IndexError):  # a thread that just ended
            continue
    return total / 1e9


def thread_wait_s() -> float | None:
    """Seconds the calling thread has waited for a CPU so far, or None where the OS does not say: one file read
    (15 µs here, against 67 µs for run_queue_wait_s over a process's four threads), cheap enough to wrap each
    DataLoader fetch of the training thread."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def own_cpu_s() -> float:
    """CPU seconds run so far by this process (every thread) and its child processes (DataLoader workers,
    anything the script started): the script's own use of the machine. A child that ended is no longer
    counted (a step it ended in looks less busy than it was: the conservative side)."""
    total = time.process_time()
    try:
        with open(f"{_TASKS}/{os.getpid()}/children") as f:
            children = f.read().split()
    except OSError:
        return total
    for pid in children:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    total += int(f.read().split()[0]) / 1e9
            except (OSError, ValueError, IndexError):
                continue
    return total


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class OwnClock:
    def __init__(self):
        self._wall0 = self._wait0 = None

    def start(self) -> None:
        self._wall0, self._wait0 = time.monotonic(), run_queue_wait_s()

    def waited(self) -> float:
        """Seconds lost to other processes since start() (at most the wall time since)."""
        now = run_queue_wait_s()
        if now is None or self._wait0 is None or self._wall0 is None:
            return 0.0
        return min(max(now - self._wait0, 0.0), time.monotonic() - self._wall0)

    def elapsed(self) -> float:
        """Seconds since start(), less those lost to other processes."""
        if self._wall0 is None:
            return 0.0
        return max(time.monotonic() - self._wall0 - self.waited(), 0.0)

    def summary(self) -> dict | None:
        if self._wall0 is None:
            return None
        return {"wall_s": round(time.monotonic() - self._wall0, 3), "waited_for_cpu_s": round(self.waited(), 3)}


BUSY_SHARE = 0.10      # of a step's wall time spent waiting for a CPU held by another process: disturbed
BUSY_MIN_S = 0.0003    # a shorter wait is scheduling noise


def disturbed(waited_s: float, wall_s: float) -> bool:
    """Whether a step that waited `waited_s` for a CPU (run_queue_wait_s) measured the machine, not the code."""
    return waited_s > BUSY_MIN_S and waited_s > BUSY_SHARE * wall_s


def waited_for_others(waited_s: float, wall_s: float, own_cpu_s: float | None, cpus: int) -> float:
    """The part of a step's wait for a CPU to put down to other processes: none when the script's own
    processes kept nearly every CPU busy over the step (`own_cpu_s`, its CPU time in the step): its threads
    then waited for each other (the intra-op pool, DataLoader workers, a pin-memory thread), which is the
    script's own doing, not a busy machine. Others then had at most BUSY_SHARE of the CPUs."""
    if own_cpu_s is not None and wall_s > 0 and own_cpu_s >= (1 - BUSY_SHARE) * cpus * wall_s:
        return 0.0
    return waited_s
