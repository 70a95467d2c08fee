"""The one way perfaudit writes a file a user sees (reports, baselines, run reports): whole or not at all.

A temporary file in the same folder is written, flushed and synced to the disk, then moved into place;
on any failure the file that was there is untouched and the error says what failed (no space, a
read-only file system, permission), as a WriteError: one line, exit code 2."""
from __future__ import annotations

import errno
import os

from .errors import WriteError

_WHY = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
        errno.EROFS: "read-only file system", errno.EACCES: "permission denied", errno.EPERM: "permission denied"}


def why(exc: OSError) -> str:
    """What an OSError of a write means, in the words the user reads."""
    return _WHY.get(exc.errno or 0, exc.strerror or str(exc))


# the child's exit code when it could not write the run folder (result.json, the trace): the errno that
# failed, for the runner to say in the user's words; no other exit of the child uses these
_WRITE_FAILED = {errno.ENOSPC: 81, errno.EDQUOT: 82, errno.EROFS: 83, errno.EACCES: 84, errno.EPERM: 85}
_WRITE_FAILED_OTHER = 86
CANNOT_WRITE = tuple(_WRITE_FAILED)  # a write that failed for these reasons is the folder's, not a bug


def free_bytes(folder: str) -> int | None:
    """The bytes this user may still write in `folder`'s file system; None when it cannot be asked."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def write_failed_exit(exc: OSError) -> int:
    return _WRITE_FAILED.get(exc.errno or 0, _WRITE_FAILED_OTHER)


def write_failure_of(returncode: int | None) -> str | None:
    """What the child could not do, from its exit code: "no space left on the device"...; None when the
    code is not one of those."""
    if returncode == _WRITE_FAILED_OTHER:
        return "a write failed"
    code = next((e for e, c in _WRITE_FAILED.items() if c == returncode), None)
    return why(OSError(code, os.strerror(code))) if code is not None else None


_INPUTS: set[tuple[int, int]] = set()  # (device, inode) of every user file this command read


def read_as_input(path: str) -> None:
    """`path` is an input of this command (a trace, a report, a baseline read back): the writer never
    replaces it, whatever name it is given as an output (a hard link, another suffix)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    _INPUTS.add((st.st_dev, st.st_ino))


def forget_inputs() -> None:
    """A long-lived process (the MCP server) starts a new command: its inputs are its own."""
    _INPUTS.clear()


def is_input(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) in _INPUTS


def write_atomic(path: str, data: str | bytes) -> None:
    """`data` (text is written as UTF-8) at `path`, all of it or nothing; never over a file this command
    read (WriteError, the file unchanged)."""
    if is_input(path):
        raise WriteError(path, errno.EEXIST, "it is an input of this command")
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.perfaudit-{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise WriteError(path, exc.errno or 0, why(exc)) from exc
    finally:
        remove_if_there(tmp)


def remove_if_there(path: str) -> None:
    """Delete a file perfaudit made (a temporary, a backup), if it is still there; never raises."""
    try:
        os.remove(path)
    except OSError:
        pass


def append_line(path: str, line: str) -> None:
    """One line added at the end of a log (JSON Lines), all of it or none: a file whose last line was
    cut short (an earlier full disk) gets a newline first, so the new line is never glued to it; on a
    failure the file is truncated back to what it was."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        with open(path, "ab+") as f:
            size = f.seek(0, os.SEEK_END)
            lead = b""
            if size:
                f.seek(size - 1)
                lead = b"" if f.read(1) == b"\n" else b"\n"
            try:
                f.write(lead + line.rstrip("\n").encode("utf-8") + b"\n")
                f.flush()
                os.fsync(f.fileno())
            except OSError:
                f.truncate(size)
                raise
    except OSError as exc:
        raise WriteError(path, exc.errno or 0, why(exc)) from exc
