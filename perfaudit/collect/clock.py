"""Time lost to other processes: how long this process's threads waited for a CPU, and whose doing it was.

On Linux, /proc/self/task/<tid>/schedstat gives each thread's run-queue delay (ns it was runnable
but not running). Their sum over a step says whether other processes disturbed it: a thread of the
intra-op pool left waiting holds up the whole parallel op, so one preempted thread can stretch a
step many times over. The recording budget's clock counts wall time less that wait, so a busy
machine does not cut the window short. A wait is the script's own where its processes filled the CPUs,
where nobody else used them lately (/proc/stat less the script's CPU time), and as far as its child
processes (DataLoader workers) ran. Elsewhere (macOS) nothing is known: the wait is 0."""
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


_children_seen: dict[str, int] = {}   # child pid -> its CPU ns when last read
_children_gone = [0]                    # CPU ns of the children that ended since


def own_cpu() -> tuple[float, float]:
    """CPU seconds run so far by this process (every thread) and its child processes (DataLoader workers,
    anything the script started), and by those children alone: the script's own use of the machine, and the
    part of it that can hold a CPU the training process waits for. A child that ended keeps what it ran until
    it was last read (workers end with each epoch): both figures only grow."""
    try:
        with open(f"{_TASKS}/{os.getpid()}/children") as f:
            pids = f.read().split()
    except OSError:
        pids = []
    now: dict[str, int] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        ran = 0
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    ran += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
        now[pid] = max(ran, _children_seen.get(pid, 0))
    _children_gone[0] += sum(ran for pid, ran in _children_seen.items() if pid not in now)
    _children_seen.clear()
    _children_seen.update(now)
    children = (sum(now.values()) + _children_gone[0]) / 1e9
    return time.process_time() + children, children


def own_cpu_s() -> float:
    """own_cpu()'s first figure: the CPU seconds of the script's processes so far."""
    return own_cpu()[0]


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


_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


def machine_cpu_s() -> float | None:
    """CPU seconds every process on the machine has run so far, all CPUs together (/proc/stat, counted in
    10 ms ticks), or None where the OS does not say."""
    try:
        with open("/proc/stat", "rb") as f:
            user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in f.readline().split()[1:8])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq) * _TICK_S


QUIET_SHARE = 0.05   # other processes ran on less than this share of the CPUs: the machine is the script's
SHARE_SPAN_S = 0.25  # the span a share is read over (10 ms ticks: shorter spans are too coarse)
SHARE_MIN_SPAN_S = 0.1
MARK_EVERY_S = 0.05


class OthersShare:
    """The share of the CPUs that processes other than the script's used over the last quarter second or more:
    the machine's CPU time (/proc/stat) less the script's own (this process and its children). A step's wait
    for a CPU on a machine nobody else used is the script's own threads and workers waiting for each other
    (2 workers on 2 cores), however it is shared out; measured here on 2 cores: -0.01 to 0.02 with a script's
    two DataLoader workers, 0.65-0.78 beside two busy loops."""

    def __init__(self, cpus: int):
        self.cpus = cpus
        self._marks: list[tuple[float, float, float]] = []   # (monotonic s, machine CPU s, own CPU s)

    def update(self, own_cpu_s: float, wanted: bool = True) -> float | None:
        """At a step boundary (`own_cpu_s`: the script's CPU seconds so far): the others' recent share, or
        None while the span is too short or the OS does not say. /proc/stat takes 20-30 µs to read: a step
        that does not want the share (it did not wait) reads it only to keep a mark every MARK_EVERY_S."""
        t = time.monotonic()
        if not wanted and self._marks and t - self._marks[-1][0] < MARK_EVERY_S:
            return None
        machine = machine_cpu_s()
        if machine is None:
            return None
        now = (t, machine, own_cpu_s)
        old = [m for m in self._marks if now[0] - m[0] >= SHARE_SPAN_S]
        self._marks = old[-1:] + [m for m in self._marks if now[0] - m[0] < SHARE_SPAN_S] + [now]
        since = old[-1] if old else self._marks[0]
        span = now[0] - since[0]
        if span < SHARE_MIN_SPAN_S:
            return None
        return max(0.0, (now[1] - since[1]) - (now[2] - since[2])) / (span * self.cpus)


_OTHERS: OthersShare | None = None


def others_share(own_cpu_s: float, wanted: bool = True) -> float | None:
    """OthersShare.update on the process's one record (every clock of the window and after it adds to it)."""
    global _OTHERS
    if _OTHERS is None:
        _OTHERS = OthersShare(usable_cpus())
    return _OTHERS.update(own_cpu_s, wanted)


BUSY_SHARE = 0.10      # of a step's wall time spent waiting for a CPU held by another process: disturbed
BUSY_MIN_S = 0.0003    # a shorter wait is scheduling noise


def disturbed(waited_s: float, wall_s: float) -> bool:
    """Whether a step that waited `waited_s` for a CPU (run_queue_wait_s) measured the machine, not the code."""
    return waited_s > BUSY_MIN_S and waited_s > BUSY_SHARE * wall_s


def waits_since(wait0: float | None, cpu0: tuple[float, float] | None, wall_s: float, cpus: int
                ) -> tuple[float, float, float | None, tuple[float, float]]:
    """Since a mark of run_queue_wait_s() and own_cpu() `wall_s` ago: (every thread's wait for a CPU, other
    processes' part of it, s), and the two readings now (the next step's mark)."""
    wait, cpu = run_queue_wait_s(), own_cpu()
    every = max(wait - wait0, 0.0) if wait is not None and wait0 is not None else 0.0
    if cpu0 is None:
        return every, waited_for_others(every, wall_s, None, cpus), wait, cpu
    share = others_share(cpu[0], wanted=every > BUSY_MIN_S)
    return every, waited_for_others(every, wall_s, cpu[0] - cpu0[0], cpus, cpu[1] - cpu0[1], share), wait, cpu


def waited_for_others(waited_s: float, wall_s: float, own_cpu_s: float | None, cpus: int,
                      children_cpu_s: float | None = None, recent_share: float | None = None) -> float:
    """The part of a step's wait for a CPU to put down to other processes: none when the script's own
    processes kept nearly every CPU busy over the step (`own_cpu_s`, its CPU time in the step): its threads
    then waited for each other (the intra-op pool, DataLoader workers, a pin-memory thread), which is the
    script's own doing, not a busy machine. Others then had at most BUSY_SHARE of the CPUs. None either when
    other processes used under QUIET_SHARE of the CPUs lately (`recent_share`: others_share()). Short of both,
    the script's child processes (`children_cpu_s`: DataLoader workers) ran that long on CPUs its training
    process could have used: as much of the wait is theirs (each second a worker runs delays at most a
    second of the training's threads), the rest is other processes'."""
    if own_cpu_s is not None and wall_s > 0 and own_cpu_s >= (1 - BUSY_SHARE) * cpus * wall_s:
        return 0.0
    if recent_share is not None and recent_share < QUIET_SHARE:
        return 0.0
    if children_cpu_s is not None and children_cpu_s > 0:
        return max(waited_s - children_cpu_s, 0.0)
    return waited_s
