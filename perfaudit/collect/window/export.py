"""Writing what a window recorded: the Kineto trace gzipped with perfaudit's probe data embedded
under the `perfaudit` key (one file to copy or attach), and result.json (the outcome), each written
to a temporary name and moved into place, so a reader never sees half a file."""
from __future__ import annotations

import errno
import gzip
import json
import os
import re
import shutil
import time

from ...files import free_bytes, remove_if_there

try:  # Intel ISA-L's gzip writer: 4x zlib's speed at level 2 for 6 % more bytes (README, Dependencies)
    from isal import igzip as _igzip

    def _gzip_writer(path: str):
        return _igzip.open(path, "wb", compresslevel=2)
except ImportError:  # a platform without its wheel: the standard library's
    def _gzip_writer(path: str):
        return gzip.open(path, "wb", compresslevel=3)


def write_json(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    text = json.dumps(data, default=str)  # C's encoder (json.dump's runs in Python: 17k traced calls a write)
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:  # a full disk, say: no partial file left to fill it further
        remove_if_there(tmp)
        raise


def export_trace(prof, plain: str, meta: dict, earlier: list | tuple = (), last_has_stacks: bool = True) -> str:
    """Kineto's JSON at `plain`, then `plain`.gz with `meta` embedded. `earlier`: the (exporter, with stacks) of
    the profiler sessions of the steps before `prof`'s, when stacks were switched on or off between steps
    (parts.py): their events come first in the one trace. Raises OSError when the profiler wrote no trace
    (Kineto does not raise when its own write fails, on a full disk say)."""
    final = plain + ".gz"
    parts = [f"{plain}.part{i}" for i in range(len(earlier))] + [plain]
    try:
        for (exporter, _), path in zip(earlier, parts):
            _export(exporter, path)
            _check_written(path)
        _export(prof, plain)
        _check_written(plain)
    except OSError:  # Kineto writes `plain`.tmp first and leaves it when the disk fills
        for path in parts:
            remove_if_there(path + ".tmp")
            remove_if_there(path)
        raise
    tmp = final + ".tmp"
    try:
        with _gzip_writer(tmp) as dst:
            dst.write(b'{"perfaudit": ' + json.dumps(meta, default=str).encode() + b",")
            if len(parts) == 1 or not _merged(parts, dst):  # one part: the last, or else the one with stacks
                stacks = [s for _, s in earlier] + [last_has_stacks]
                with open(parts[stacks.index(True)] if True in stacks else plain, "rb") as src:
                    _skip_to_brace(src)
                    shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, final)
    except OSError:  # the disk filled up, say: the plain trace stays, unembedded but readable
        remove_if_there(tmp)
        for path in parts[:-1]:
            remove_if_there(path)
        return plain
    for path in parts:
        remove_if_there(path)
    return final


_EVENTS_OPEN = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENTS_CLOSE = re.compile(rb'\]\s*(?:,\s*"traceName"|\}\s*$)')  # Kineto writes `traceName` after the list


def _events_span(path: str) -> tuple[int, int] | None:
    """Where the content of the trace's `traceEvents` list begins (after `[`) and ends (at its `]`), or None
    when the file is not laid out as Kineto writes it."""
    with open(path, "rb") as f:
        opened = _EVENTS_OPEN.search(f.read(1 << 20))
        size = os.fstat(f.fileno()).st_size
        base = max(size - (1 << 16), 0)
        f.seek(base)
        closes = list(_EVENTS_CLOSE.finditer(f.read()))
    if opened is None or not closes or base + closes[-1].start() < opened.end():
        return None
    return opened.end(), base + closes[-1].start()


def _merged(parts: list[str], dst) -> bool:
    """One trace from the parts, written to `dst` after the embedded metadata: the last part's header (its
    traceName is the trace's own), every part's events in order, the last part's tail; False (nothing written)
    when a part is not laid out as Kineto writes it or holds no events."""
    spans = []
    for path in parts:
        span = _events_span(path)
        if span is None or not _holds_events(path, span):
            return False
        spans.append(span)
    with open(parts[-1], "rb") as last:
        _skip_to_brace(last)
        _copy(last, dst, spans[-1][0] - last.tell())  # up to and with `"traceEvents": [`
        for path, (start, end) in zip(parts[:-1], spans[:-1]):
            with open(path, "rb") as part:
                part.seek(start)
                _copy(part, dst, end - start)
            dst.write(b",")
        shutil.copyfileobj(last, dst, 1 << 20)
    return True


def _holds_events(path: str, span: tuple[int, int]) -> bool:
    """Whether the list holds an event: it opens with `{` and closes with `}` (nor `[ ,` nor `, ]` when joined)."""
    with open(path, "rb") as f:
        f.seek(span[0])
        head = f.read(min(64, span[1] - span[0]))
        f.seek(max(span[1] - 64, span[0]))
        tail = f.read(span[1] - f.tell())
    return head.lstrip().startswith(b"{") and tail.rstrip().endswith(b"}")


def _copy(src, dst, length: int) -> None:
    while length > 0:
        chunk = src.read(min(length, 1 << 20))
        if not chunk:
            raise OSError("the trace file ended early")
        dst.write(chunk)
        length -= len(chunk)


# Kineto's exporter now and then refuses with "No logger registered for the file protocol prefix" (a ValueError;
# seen once in some hundred runs on a 2-core machine with two busy loops beside the suite): its file logger is
# registered by Kineto's own start-up, which a loaded machine can delay. Tried again after a pause, it writes.
EXPORT_RETRIES = (0.2, 1.0, 3.0)


def _export(prof, plain: str) -> None:
    for pause in (*EXPORT_RETRIES, None):
        try:
            prof.export_chrome_trace(plain)
            return
        except ValueError:
            if pause is None:
                raise
            time.sleep(pause)


def _check_written(plain: str) -> None:
    """Kineto says nothing when its write fails: a missing or empty file on a full disk is named so."""
    folder = os.path.dirname(os.path.abspath(plain))
    try:
        with open(plain, "rb") as f:
            head = _skip_to_brace(f)
    except FileNotFoundError:
        if disk_full(folder):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), folder) from None
        raise
    if head != b"{" and disk_full(folder):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), folder)
    if head != b"{":
        size = os.path.getsize(plain)
        remove_if_there(plain)
        raise OSError(f"the profiler's trace file is {'empty' if not head else 'not JSON'} ({size} bytes)")


def disk_full(folder: str, margin: int = 1 << 20) -> bool:
    """Less than `margin` bytes free for this user in `folder`'s file system."""
    free = free_bytes(folder)
    return free is not None and free < margin


def _skip_to_brace(f) -> bytes:
    """Reads past leading whitespace and the opening brace; returns that first byte."""
    head = f.read(1)
    while head and head.isspace():
        head = f.read(1)
    return head
