"""Writing what a window recorded: the Kineto trace gzipped with perfaudit's probe data embedded
under the `perfaudit` key (one file to copy or attach), and result.json (the outcome), each written
to a temporary name and moved into place, so a reader never sees half a file."""
from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
import time

from ...files import free_bytes, remove_if_there


def write_json(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(data, f, default=str)
        os.replace(tmp, path)
    except OSError:  # a full disk, say: no partial file left to fill it further
        remove_if_there(tmp)
        raise


def export_trace(prof, plain: str, meta: dict) -> str:
    """Kineto's JSON at `plain`, then `plain`.gz with `meta` embedded. Raises OSError when the profiler
    wrote no trace (Kineto does not raise when its own write fails, on a full disk say)."""
    final = plain + ".gz"
    try:
        _export(prof, plain)
        _check_written(plain)
    except OSError:  # Kineto writes `plain`.tmp first and leaves it when the disk fills
        remove_if_there(plain + ".tmp")
        remove_if_there(plain)
        raise
    tmp = final + ".tmp"
    try:
        with open(plain, "rb") as src, gzip.open(tmp, "wb", compresslevel=3) as dst:
            dst.write(b'{"perfaudit": ' + json.dumps(meta, default=str).encode() + b",")
            _skip_to_brace(src)
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, final)
    except OSError:  # the disk filled up, say: the plain trace stays, unembedded but readable
        remove_if_there(tmp)
        return plain
    remove_if_there(plain)
    return final


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
