"""The processes of a run: the script's process group (or, under torchrun, each rank's), signalled to
stop or asked for what was recorded, and whatever the run left behind when it ends."""
from __future__ import annotations

import os
import signal


def become_subreaper() -> bool:
    """Linux: orphaned descendants of the script (a helper it started in a session of its own, which
    killing the script's process group does not reach) are re-parented to this process, so that they can
    be found and stopped when the run ends."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def kill_orphans(known: set[int]) -> None:
    """Stop every child of this process that the run left behind (re-parented to us as subreaper)."""
    for pid in own_children() - known:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError, PermissionError):
            pass


def kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def children_of(parent: int) -> set[int]:
    out = set()
    for p in (p for p in os.listdir("/proc") if p.isdigit()) if os.path.isdir("/proc") else ():
        try:
            with open(f"/proc/{p}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == parent:
                    out.add(int(p))
        except (OSError, ValueError, IndexError):
            continue
    return out


def own_children() -> set[int]:
    return children_of(os.getpid())


def signal_run(proc, launched: bool, sig: int) -> None:
    """`sig` to the script's processes. Under torchrun each rank is the leader of a session of its own
    (torchrun starts them so), and torchrun has no SIGUSR1 handler: the ranks are asked, each with its
    DataLoader workers, while torchrun waits for them to end and then ends itself. Asked before any rank
    started, or told to die, torchrun's group is signalled too."""
    if not launched:
        kill_group(proc.pid, sig)
        return
    ranks = children_of(proc.pid)
    for rank in ranks:
        kill_group(rank, sig)
    if sig == signal.SIGKILL or not ranks:
        kill_group(proc.pid, sig if sig == signal.SIGKILL else signal.SIGTERM)
