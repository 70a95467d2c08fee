"""The bytes a trace comes in: opened plain or gzipped (ISA-L's reader where it exists), through a pipe
(spooled to a temporary file), guarded against giant values, repaired where a torch version writes
invalid JSON, and the top-level metadata written after the events recovered from the stream's tail."""
from __future__ import annotations

import codecs
import collections
import gzip
import io
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import zlib

from ..errors import TraceError

# Kineto writes each event's name on one line, followed by its pid: `"name": "...", "pid": `
_NAME_LINE = re.compile(rb'^(\s*"ph": "X", "cat": "[^"]*", "name": ")(.*)(", "pid": .*)$')
# Kineto's indented layout: a name alone on its line (a record_function label with quotes in it)
_NAME_ALONE = re.compile(rb'^(\s*"name": ")(.*)(",?\s*)$')
# the lines either layout puts a name on, found in a chunk in one pass
_NAME_LINES = re.compile(rb'^[ \t]*(?:"ph": "X", "cat": "[^"\n]*", )?"name": "[^\n]*$', re.M)
_JSON_STRING = rb'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*'
# a name line as it should be: a valid string, then the line's end or a comma and the next fields
_VALID_NAME_LINE = re.compile(rb'\s*(?:"ph": "X", "cat": "[^"\n]*", )?"name": "' + _JSON_STRING
                              + rb'"\s*(?:,\s*(?:"[^"\n]*":.*)?)?')
# what a JSON string may not hold bare: a quote, a backslash that begins no escape, a control character
_UNESCAPED = re.compile(rb'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})|["\\\x00-\x1f]')


def _escape(match) -> bytes:
    found = match.group(0)
    if len(found) > 1:  # a valid escape: kept as it is
        return found
    return b'\\"' if found == b'"' else b"\\\\" if found == b"\\" else b"\\u%04x" % found[0]


def _escape_name(line: bytes) -> bytes:
    """An event name made a valid JSON string: quotes left bare escaped (torch 2.9 writes a Python frame whose
    name ends in a quote that way, any torch a `record_function('phase "fwd"')` label as it is), and so are
    a lone backslash and control characters: one stray byte in one name no longer costs the whole trace."""
    if _VALID_NAME_LINE.fullmatch(line):
        return line
    m = _NAME_LINE.match(line) or _NAME_ALONE.match(line)
    if m is None:
        return line
    return m.group(1) + _UNESCAPED.sub(_escape, m.group(2)) + m.group(3)


def _escape_names(text: bytes) -> tuple[bytes, int]:
    """`text` with its names made valid, and how many needed it."""
    repaired = 0

    def one(m) -> bytes:
        nonlocal repaired
        line = m.group(0)
        fixed = _escape_name(line)
        repaired += fixed is not line
        return fixed
    return _NAME_LINES.sub(one, text), repaired


class _Repair(io.RawIOBase):
    """A byte stream with what some torch versions write wrong put right: invalid UTF-8 replaced
    (torch 2.13 writes some in event names) and event names made valid JSON strings (_escape_name)."""

    def __init__(self, raw):
        self._raw = raw
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = b""
        self._partial = b""  # a line not yet complete
        self.repaired_names = 0

    def readable(self):
        return True

    def _fill(self) -> None:
        while not self._buf:
            chunk = self._raw.read(1 << 20)
            if not chunk:
                text = self._partial + self._decoder.decode(b"", final=True).encode()
                self._buf, self._partial = self._repaired(text), b""
                return
            text = self._partial + self._decoder.decode(chunk).encode()
            cut = text.rfind(b"\n") + 1
            self._partial = text[cut:]
            self._buf = self._repaired(text[:cut])

    def _repaired(self, text: bytes) -> bytes:
        text, count = _escape_names(text)
        self.repaired_names += count
        return text

    def readinto(self, b):
        self._fill()
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


try:  # Intel ISA-L's gzip reader: the same format, about 3.5x faster than zlib's (README, Dependencies)
    from isal import igzip as _igzip
    from isal import isal_zlib as _isal_zlib
    _gunzip = _igzip.open
    _GZIP_ERRORS: tuple = (EOFError, zlib.error, gzip.BadGzipFile, _isal_zlib.error)
except ImportError:  # a platform without its wheel: the standard library
    _gunzip = gzip.open
    _GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


# bytes: a JSON trace has a `"` every few hundred bytes. The JSON reader's time on one unfinished
# string grows with the square of its length (8 MiB: 0.3 s, 64 MiB: 16 s), so the bound stays low.
MAX_RUN_WITHOUT_QUOTE = 8 << 20
MAX_EVENTS = int(os.environ.get("PERFAUDIT_MAX_EVENTS", 6_000_000))  # events kept: memory stays bounded


class _Guard(io.RawIOBase):
    """The decompressed bytes, checked as they stream: a run of 8 MiB without a quote is no event of a
    profiler trace (a 4 MB gzip can hold one name of 4 GB), so reading stops there with a clear error
    instead of building a string of gigabytes."""

    TAIL = 4 << 20  # the last bytes read are kept: top-level keys written after the events live there

    def __init__(self, raw, path: str):
        self._raw, self._path, self._since_quote = raw, path, 0
        self._recent: collections.deque[bytes] = collections.deque()  # the last reads, not copied
        self._recent_size = 0

    def readable(self):
        return True

    def readinto(self, b):
        data = self._raw.read(len(b))
        n = len(data)
        b[:n] = data
        self._recent.append(data)
        self._recent_size += n
        while self._recent_size - len(self._recent[0]) >= self.TAIL:
            self._recent_size -= len(self._recent.popleft())
        last = data.rfind(b'"')
        self._since_quote = self._since_quote + n if last < 0 else n - last - 1
        if self._since_quote > MAX_RUN_WITHOUT_QUOTE:
            raise TraceError(f"{self._path}: not a profiler trace: {MAX_RUN_WITHOUT_QUOTE >> 20} MiB without a "
                             "single string (a giant value, or not JSON)")
        return n

    @property
    def tail(self) -> bytes:
        """At least the last TAIL bytes read (all, when fewer were)."""
        return b"".join(self._recent)

    def close(self):
        self._raw.close()
        super().close()


def _open(path: str):
    return io.BufferedReader(_Guard(_open_raw(path), path), 1 << 20)


def _meta_after_events(f, meta: dict) -> None:
    """Top-level keys written after `traceEvents` (re-saved traces put deviceProperties and
    distributedInfo there): read to the end, then parse what follows the events' closing bracket from
    the bytes the stream kept. Keys from before the events win."""
    while f.read(1 << 20):
        pass
    guard = f.raw if isinstance(f.raw, _Guard) else None
    tail = guard.tail.decode("utf-8", "replace") if guard is not None else ""
    # the events' closing bracket is the first `], "` whose members run to the end of the file; inside
    # the events a candidate fails at the end of its own object, so each try is short. A trace smaller
    # than the tail holds its head too: a list before the events (deviceProperties) closes with
    # `], "traceEvents"`, and its members run to the end as well: not the one sought
    for candidate in _CLOSING.finditer(tail):
        found = _members_to_end(tail, candidate.end() - 1)
        if found is not None and "traceEvents" not in found:
            _merge(meta, found)
            return


def meta_after_list(after: bytes, meta: dict) -> None:
    """Top-level keys written after the events, from the bytes that follow the `]` closing traceEvents
    (`, "key": value, … }`: where the fast path found that bracket). Keys from before the events win."""
    text = after.decode("utf-8", "replace")
    at = _after_space(text, 0)
    if text[at:at + 1] == ",":
        _merge(meta, _members_to_end(text, _after_space(text, at + 1)) or {})


def _merge(meta: dict, found: dict) -> None:
    for key, value in found.items():
        if key == UNREADABLE_META:
            meta.setdefault(key, []).extend(value)
        else:
            meta.setdefault(key, value)


_CLOSING = re.compile(r'\]\s*,\s*"')
_SPACE = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


def _after_space(text: str, at: int) -> int:
    """The index of the first character at or after `at` that is not white space."""
    found = _SPACE.match(text, at)
    return found.end() if found else at


UNREADABLE_META = "perfaudit#unreadable"  # meta's key for the parts the reader could not decode, named


def _members_to_end(text: str, at: int) -> dict | None:
    """`"key": value, …}` from `at` to the end of `text` (only white space after the brace), or None;
    a value nested past what Python's decoder takes makes the rest unreadable, which is named."""
    out: dict = {}
    try:
        while True:
            key, at = _DECODER.raw_decode(text, at)
            at = _after_space(text, at)
            if not isinstance(key, str) or text[at:at + 1] != ":":
                return None
            value, at = _DECODER.raw_decode(text, _after_space(text, at + 1))
            out[key] = value
            at = _after_space(text, at)
            if text[at:at + 1] == "}":
                return out if _after_space(text, at + 1) == len(text) else None
            if text[at:at + 1] != ",":
                return None
            at = _after_space(text, at + 1)
    except ValueError:
        return None
    except RecursionError:
        out[UNREADABLE_META] = ["the metadata after the events is not JSON metadata: nested too deeply"]
        return out


def _open_raw(path: str):
    if not os.path.exists(path):
        if os.path.islink(path):  # a link to nowhere, or a loop of links
            try:
                os.stat(path)
            except OSError as exc:
                raise TraceError(f"{path}: cannot read ({exc.strerror})") from exc
        raise TraceError(f"trace file not found: {path}")
    if os.path.isdir(path):
        raise TraceError(f"{path} is a directory; pass trace files, or use `perfaudit analyze DIR`")
    if os.path.getsize(path) == 0 and stat.S_ISREG(os.stat(path).st_mode):
        raise TraceError(f"trace file is empty: {path}")
    with open(path, "rb") as f:
        magic = f.read(2)
    return _gunzip(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


class _Prepend(io.RawIOBase):
    """The head already read, then the rest of the stream."""

    def __init__(self, head: bytes, rest):
        self._head, self._rest = head, rest

    def readable(self):
        return True

    def readinto(self, b):
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(b))
        b[: len(data)] = data
        return len(data)


def _spool(path: str) -> str | None:
    """A temporary copy of a trace that comes through a pipe (it can be read once, and has no size)."""
    if path != "-":
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return None
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
            return None
    fd, tmp = tempfile.mkstemp(prefix="perfaudit-stdin-", suffix=".json")
    try:
        source = open(path, "rb") if path != "-" else os.fdopen(os.dup(sys.stdin.fileno()), "rb")
        with os.fdopen(fd, "wb") as out, source as src:
            shutil.copyfileobj(src, out, 1 << 20)
    except OSError as exc:
        os.remove(tmp)
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if os.path.getsize(tmp) == 0:
        os.remove(tmp)
        raise TraceError(f"{path}: nothing came through the pipe (an empty trace)")
    return tmp
