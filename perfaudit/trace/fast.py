"""The fast path for the layout torch.profiler and Kineto write: `traceEvents` a list of objects, one
after another, each ending at a line break (Kineto's indented objects, or one object per line).

The stream is read in bounded chunks; each chunk is cut after the last complete event and decoded
at once by msgspec into a struct that holds only the fields the analysis reads (`args` is kept as
raw bytes and decoded only for the few events that need it). Anything that does not fit this layout
raises NotFastLayout, and the caller parses the file again with the general streaming parser."""
from __future__ import annotations

from typing import Any

import msgspec

CHUNK = 1 << 20   # bytes decoded at once: memory stays bounded (larger chunks cost RSS, not speed)


class NotFastLayout(Exception):
    """The events are not laid out as the fast path expects (or not valid JSON): use the fallback."""


_UNSET = msgspec.UNSET


class RawArgs(msgspec.Struct):
    """The args any fact reads; every other key is skipped by the decoder, unread."""
    correlation: Any = _UNSET
    bytes: Any = _UNSET
    input_dims: Any = msgspec.field(default=_UNSET, name="Input Dims")
    device_type: Any = msgspec.field(default=_UNSET, name="Device Type")
    device_id: Any = msgspec.field(default=_UNSET, name="Device Id")
    total_allocated: Any = msgspec.field(default=_UNSET, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=_UNSET, name="Total Reserved")


# the JSON key of each RawArgs field
ARG_KEYS = {f: (msgspec.structs.fields(RawArgs)[i].encode_name) for i, f in enumerate(RawArgs.__struct_fields__)}


_DECODE_ARGS = msgspec.json.Decoder(RawArgs).decode


def args_dict(raw: msgspec.Raw) -> dict:
    """The args an event holds that a fact reads, under their JSON keys (what the general parser's
    dict would hold of them). Decoded here, for the few events that need them, not with every event."""
    if not raw:
        return {}
    try:
        args = _DECODE_ARGS(raw)
    except msgspec.DecodeError:  # args that are not an object: ignored, as by the general parser
        return {}
    return {ARG_KEYS[f]: v for f in RawArgs.__struct_fields__ if (v := getattr(args, f)) is not _UNSET}


class RawEvent(msgspec.Struct):
    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    pid: Any = None
    tid: Any = None
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)  # undecoded: most events need none


_DECODE = msgspec.json.Decoder(list[RawEvent]).decode


def _cut(buf: bytes) -> int:
    """The end of the last complete event in buf: just after a `}` (or `},`) that ends a line and is
    followed by a line that opens the next event. 0 when there is none yet."""
    end = len(buf)
    while True:
        nl = buf.rfind(b"\n", 0, end)
        if nl <= 0:
            return 0
        after = buf[nl + 1:nl + 64].lstrip(b" \t,\r")
        before = buf[max(nl - 4, 0):nl].rstrip(b" \t,\r")
        if after[:1] == b"{" and before.endswith(b"}"):
            return nl
        end = nl


def _batch(piece: bytes) -> list[RawEvent]:
    body = piece.strip().strip(b",").strip()
    if not body:
        return []
    try:
        return _DECODE(b"[" + body + b"]")
    except msgspec.DecodeError as exc:
        raise NotFastLayout(str(exc)) from None


def batches(stream, first: bytes):
    """Yield lists of RawEvents from a stream positioned inside `traceEvents` (`first`: bytes already
    read after its `[`). Ends at the `]` that closes the list; what follows is not read."""
    buf = first
    while True:
        chunk = stream.read(CHUNK)
        buf += chunk
        cut = _cut(buf)
        if cut:
            yield _batch(buf[:cut])
            buf = buf[cut:]
        if not chunk:
            break
        if not cut and len(buf) > 8 * CHUNK:
            raise NotFastLayout("no event boundary found in the layout expected")
    # what is left: the last event, the `]` closing the list, and metadata written after it
    end = _last_event_end(buf)
    if end < 0:
        raise NotFastLayout("no end of traceEvents")
    yield _batch(buf[:end])


def _last_event_end(buf: bytes) -> int:
    """The end of the last event: a line ending in `}` followed by the list's `]` (or `]` right
    after `}`); 0 for an empty list; -1 when neither is found."""
    if buf.lstrip()[:1] == b"]":
        return 0
    pos = 0
    while True:
        nl = buf.find(b"\n", pos)
        if nl < 0:
            break
        if buf[nl + 1:nl + 64].lstrip()[:1] == b"]" and buf[:nl].rstrip().endswith(b"}"):
            return nl
        pos = nl + 1
    close = buf.find(b"}]")
    return close + 1 if close >= 0 else -1
