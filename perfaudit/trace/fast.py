"""The fast path for the layout torch.profiler and Kineto write: `traceEvents` a list of objects, one
after another (Kineto's indented objects, one object per line, or compact with no line breaks at all).

The stream is read in bounded chunks; each chunk is cut after the last complete event and decoded
at once by msgspec into a struct that holds only the fields the analysis reads (`args` is kept as
raw bytes and decoded only for the few events that need it). Anything that does not fit this layout
raises NotFastLayout, and the caller parses the file again with the general streaming parser."""
from __future__ import annotations

import re
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


_SPACE = b" \t\r\n"
RETRIES = 16      # earlier boundaries tried when a cut fell inside an event (a `},{` in its args or name)


def _cut(buf: bytes, end: int | None = None) -> int:
    """The end of the last event that looks complete before `end`: just after a `}` followed by `,` and
    the `{` of the next event, with or without white space and line breaks between them (Kineto's
    indented objects, one per line, or compact as `json.dump` writes). 0 when there is none. A `},{`
    inside an event's args or a string also matches: the decoder then fails and the caller tries the
    boundary before it."""
    end = len(buf) if end is None else end
    while True:
        brace = buf.rfind(b"{", 0, end)
        if brace <= 0:
            return 0
        i = brace - 1
        while i >= 0 and buf[i] in _SPACE:
            i -= 1
        if i > 0 and buf[i] == 0x2C:  # ,
            i -= 1
            while i >= 0 and buf[i] in _SPACE:
                i -= 1
            if i >= 0 and buf[i] == 0x7D:  # }
                return i + 1
        end = brace


def _batch(piece: bytes) -> list[RawEvent]:
    body = piece.strip().strip(b",").strip()
    if not body:
        return []
    try:
        return _DECODE(b"[" + body + b"]")
    except msgspec.DecodeError as exc:
        raise NotFastLayout(str(exc)) from None


def _decode_upto(buf: bytes) -> tuple[list[RawEvent], int]:
    """The events of buf up to its last event boundary that decodes, and where that boundary is (0, when
    none was found yet)."""
    cut = _cut(buf)
    for _ in range(RETRIES):
        if not cut:
            return [], 0
        try:
            return _batch(buf[:cut]), cut
        except NotFastLayout:
            cut = _cut(buf, cut - 1)
    raise NotFastLayout("no event boundary that decodes")


def batches(stream, first: bytes):
    """Yield lists of RawEvents from a stream positioned inside `traceEvents` (`first`: bytes already
    read after its `[`). Ends at the `]` that closes the list; what follows is not read."""
    buf = first
    while True:
        chunk = stream.read(CHUNK)
        buf += chunk
        events, cut = _decode_upto(buf)
        if cut:
            yield events
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


_CLOSE = re.compile(rb"\}\s*\]")


def _last_event_end(buf: bytes) -> int:
    """The end of the last event: the first `}` followed by the `]` closing the list after which the
    events decode (a `}]` inside the last event's args does not); 0 for an empty list; -1 when none."""
    if buf.lstrip(_SPACE + b",")[:1] == b"]":
        return 0
    for m in _CLOSE.finditer(buf):
        try:
            _batch(buf[:m.start() + 1])
        except NotFastLayout:
            continue
        return m.start() + 1
    return -1
