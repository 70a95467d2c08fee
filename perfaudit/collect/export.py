"""Writing what a window recorded: the Kineto trace gzipped with perfaudit's probe data embedded
under the `perfaudit` key (one file to copy or attach), and result.json (the outcome), each written
to a temporary name and moved into place, so a reader never sees half a file."""
from __future__ import annotations

import gzip
import json
import os
import shutil


def write_json(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, default=str)
    os.replace(tmp, path)


def export_trace(prof, plain: str, meta: dict) -> str | None:
    """Kineto's JSON at `plain`, then `plain`.gz with `meta` embedded; None when nothing was written."""
    final = plain + ".gz"
    prof.export_chrome_trace(plain)
    tmp = final + ".tmp"
    try:
        with open(plain, "rb") as src, gzip.open(tmp, "wb", compresslevel=3) as dst:
            head = src.read(1)
            while head and head.isspace():
                head = src.read(1)
            if head != b"{":
                return None
            dst.write(b'{"perfaudit": ' + json.dumps(meta, default=str).encode() + b",")
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, final)
    except OSError:  # the disk filled up, say: the plain trace stays, unembedded but readable
        _remove(tmp)
        return plain if os.path.exists(plain) else None
    _remove(plain)
    return final


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
