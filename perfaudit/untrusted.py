"""Reading what perfaudit did not write in this process: a history file committed to a repository, a
report or a baseline from another run, a notebook, a tool's arguments, a trace's metadata (its probes are
then checked part by part against probe_schema). Each is read as hostile: bounded in
size (a file larger than its bound is refused, or only its tail is read) and in depth, decoded into the
shape perfaudit expects (msgspec, typed), and a bad record is skipped and named. The only exceptions are
Unreadable (one line for the user, exit code 2) and FileNotFoundError (the caller says what was missing)."""
from __future__ import annotations

import json
import os
from typing import Any, TypeVar

import msgspec

from .errors import UsageError
from .files import read_as_input

T = TypeVar("T")

MAX_DOCUMENT_BYTES = 256 << 20  # a report, a baseline, a notebook: larger is not one perfaudit wrote
MAX_RECORD_BYTES = 1 << 20      # one line of a JSON Lines log (a history entry is a few kB)
_BLOCK = 1 << 20                # the tail of a log is read backwards a block at a time
_BAD = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError)


class Unreadable(UsageError):
    """A file that is not what it should be: what it is, where, and why, in one line."""


def decode(data: bytes | str, type: Any = Any, what: str = "JSON") -> Any:
    """`data` decoded as `type` (a TypedDict, a list of them, Any), or Unreadable saying why not."""
    try:
        try:
            return msgspec.json.decode(data, type=type)
        except msgspec.DecodeError:  # not strict JSON: Python's json also writes NaN and Infinity
            return msgspec.convert(json.loads(data), type=type)
    except msgspec.ValidationError as exc:
        raise Unreadable(f"not {what}: {exc}") from None
    except RecursionError:
        raise Unreadable(f"not {what}: nested too deeply") from None
    except ValueError as exc:  # json's JSONDecodeError, invalid UTF-8
        raise Unreadable(f"not {what}: not valid JSON ({exc})") from None


def load(path: str, type: Any = Any, what: str = "JSON", max_bytes: int = MAX_DOCUMENT_BYTES,
         updated_in_place: bool = False) -> Any:
    """The file at `path` decoded as `type`; Unreadable (the path in its message) when it is larger than
    `max_bytes`, cannot be read or is not `what`. FileNotFoundError passes through. The file is an input
    of the command, which the writer never replaces, unless it is one the command is meant to update
    (`updated_in_place`: a baseline read and written again)."""
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
        if not updated_in_place:
            read_as_input(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise Unreadable(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise Unreadable(f"{path} is larger than {max_bytes >> 20} MB: not {what} perfaudit reads")
    try:
        return decode(data, type, what)
    except Unreadable as exc:
        raise Unreadable(f"{path} is {exc}") from None


def tail(path: str, type: Any = Any, last: int = 1000, what: str = "a record",
         max_record_bytes: int = MAX_RECORD_BYTES) -> tuple[list[Any], list[str]]:
    """The last `last` records of a JSON Lines file, oldest first, each decoded as `type`, and a note per
    line that was skipped ("FILE:LINE is not a record: why"). Only the tail is read (a log that grew to
    gigabytes costs what its last lines cost); a missing file is no records."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        raise Unreadable(f"{path}: cannot read it ({exc.strerror or exc})") from None
    with f:
        lines, start = _last_lines(f, last, max_record_bytes)
        first_line = 1 + _count_newlines(f, start)
    records, notes = [], []
    for number, raw in enumerate(lines, first_line):
        if raw is None:
            notes.append(f"{path}:{number} is longer than {max_record_bytes >> 10} kB: skipped")
            continue
        if not raw.strip():
            continue
        try:
            records.append(decode(raw, type, what))
        except Unreadable as exc:
            notes.append(f"{path}:{number} is {exc}: skipped")
    return records, notes


def _last_lines(f, last: int, max_record_bytes: int) -> tuple[list[bytes | None], int]:
    """The file's last `last` lines (None for one longer than the bound: skipped as it is read, never
    held) and the offset where the first of them starts. Read backwards a block at a time."""
    end = f.seek(0, os.SEEK_END)
    if end == 0 or last <= 0:
        return [], end
    f.seek(end - 1)
    ends_with_newline = f.read(1) == b"\n"
    pos = end - 1 if ends_with_newline else end  # the final newline ends the last line: not a line after it
    found: list[tuple[bytes | None, int]] = []   # (line or None, its length), the last line first
    pending: bytes | None = b""  # the end of a line that starts in an earlier block (None: over the bound)
    pending_len = 0
    while pos > 0 and len(found) < last:
        step = min(_BLOCK, pos)
        pos -= step
        f.seek(pos)
        parts = f.read(step).split(b"\n")
        for i in range(len(parts) - 1, 0, -1):  # the lines that start in this block, the last first
            length = len(parts[i]) + pending_len
            found.append((parts[i] + pending if pending is not None and length <= max_record_bytes else None, length))
            pending, pending_len = b"", 0
        pending_len += len(parts[0])
        pending = parts[0] + pending if pending is not None and pending_len <= max_record_bytes else None
    if pos == 0 and len(found) < last:
        found.append((pending if pending_len <= max_record_bytes else None, pending_len))
    kept = found[:last][::-1]
    start = end - sum(length + 1 for _, length in kept) + (0 if ends_with_newline else 1)
    return [line for line, _ in kept], max(start, 0)


def _count_newlines(f, stop: int) -> int:
    f.seek(0)
    count, read = 0, 0
    while read < stop:
        block = f.read(min(_BLOCK, stop - read))
        if not block:
            break
        count += block.count(b"\n")
        read += len(block)
    return count
