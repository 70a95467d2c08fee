"""Writing what a window recorded: the Kineto trace gzipped with perfaudit's probe data embedded
under the `perfaudit` key (one file to copy or attach), and result.json (the outcome), each written
to a temporary name and moved into place, so a reader never sees half a file."""
from __future__ import annotations

import gzip
import json
import os
import shutil

from ...files import remove_if_there


def write_json(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, default=str)
    os.replace(tmp, path)


def export_trace(prof, plain: str, meta: dict) -> str:
    """Kineto's JSON at `plain`, then `plain`.gz with `meta` embedded. Raises OSError when the profiler
    wrote no trace (Kineto does not raise when its own write fails, on a full disk say)."""
    final = plain + ".gz"
    prof.export_chrome_trace(plain)
    _check_written(plain)
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


def _check_written(plain: str) -> None:
    with open(plain, "rb") as f:
        head = _skip_to_brace(f)
    if head != b"{":
        size = os.path.getsize(plain)
        remove_if_there(plain)
        raise OSError(f"the profiler's trace file is {'empty' if not head else 'not JSON'} ({size} bytes)")


def _skip_to_brace(f) -> bytes:
    """Reads past leading whitespace and the opening brace; returns that first byte."""
    head = f.read(1)
    while head and head.isspace():
        head = f.read(1)
    return head
