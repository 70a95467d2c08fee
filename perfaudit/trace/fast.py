"""The fast path for the layout torch.profiler and Kineto write: `traceEvents` a list of objects, one
after another (Kineto's indented objects, one object per line, or compact with no line breaks at all).

The stream is read in bounded chunks; each chunk is cut after the last complete event and decoded
at once by msgspec into a struct of the fields the analysis reads, `args` kept as raw bytes; the args of
the events a fact reads them from are decoded together, once per chunk. Anything that does not fit this layout
raises NotFastLayout, and the caller parses the file again with the general streaming parser."""
from __future__ import annotations

import re
from typing import Any

import msgspec

CHUNK = 1 << 20   # bytes decoded at once: memory stays bounded (larger chunks cost RSS, not speed)


class NotFastLayout(Exception):
    """The events are not laid out as the fast path expects (or not valid JSON): use the fallback."""


_UNSET = msgspec.UNSET


class RawArgs(msgspec.Struct, gc=False):
    """The args any fact reads; every other key is skipped by the decoder, unread."""
    correlation: Any = _UNSET
    bytes: Any = _UNSET
    input_dims: Any = msgspec.field(default=_UNSET, name="Input Dims")
    input_type: Any = msgspec.field(default=_UNSET, name="Input type")
    concrete_inputs: Any = msgspec.field(default=_UNSET, name="Concrete Inputs")
    device_type: Any = msgspec.field(default=_UNSET, name="Device Type")
    device_id: Any = msgspec.field(default=_UNSET, name="Device Id")
    total_allocated: Any = msgspec.field(default=_UNSET, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=_UNSET, name="Total Reserved")
    block_bytes: Any = msgspec.field(default=_UNSET, name="Bytes")   # a [memory] event's (de)allocation
    addr: Any = msgspec.field(default=_UNSET, name="Addr")
    sequence: Any = msgspec.field(default=_UNSET, name="Sequence number")  # a backward node's forward op's


# the RawArgs field of each JSON key
FIELD_OF = {f.encode_name: f.name for f in msgspec.structs.fields(RawArgs)}


class RawEvent(msgspec.Struct):
    """An event as the trace holds it, fields the analysis reads only; `args` undecoded (most events need
    none). Transient: the parser makes the model's Event of those it keeps, and a chunk's RawEvents are
    freed together (decoding straight into kept events leaves them scattered among freed ones, and
    allocation slows down: measured)."""
    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    pid: Any = None
    tid: Any = None
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


def decode_args(raws: list[msgspec.Raw]) -> list[RawArgs] | list[RawArgs | None]:
    """The RawArgs of many events' undecoded args, in one call (a call per event costs more than the
    decoding); None for args that are not an object (ignored, as by the general parser)."""
    try:
        return _DECODE_ARGS(b"[" + b",".join(raws) + b"]")
    except msgspec.DecodeError:
        return [one_args(raw) for raw in raws]


def one_args(raw: msgspec.Raw) -> RawArgs | None:
    """The RawArgs of one event's undecoded args; None when it has none, or they are not an object."""
    try:
        return _DECODE_ONE_ARGS(raw) if raw else None
    except msgspec.DecodeError:
        return None


def kept_args(args: RawArgs | None, keys: tuple[str, ...]) -> dict:
    """The args among `keys` the event holds, under their JSON keys (what the general parser's dict holds
    of them)."""
    if args is None:
        return {}
    return {key: value for key in keys if (value := getattr(args, FIELD_OF[key])) is not _UNSET}


def _correlation_only(args: RawArgs | None) -> dict:
    corr = _UNSET if args is None else args.correlation
    return {"correlation": corr} if corr is not _UNSET else {}


def keeper(keys: tuple[str, ...]):
    """A function from an event's RawArgs to the dict of those among `keys` it holds (runtime calls and
    kernels keep only their correlation id: the commonest case, done without a loop)."""
    if keys == ("correlation",):
        return _correlation_only
    unknown = [k for k in keys if k not in FIELD_OF]
    if unknown:
        raise KeyError(f"RawArgs does not decode {unknown}: add them to it")
    return lambda args: kept_args(args, keys)


_DECODE_ARGS = msgspec.json.Decoder(list[RawArgs]).decode
_DECODE_ONE_ARGS = msgspec.json.Decoder(RawArgs).decode
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


def _decode_to(rest: bytes, chunk: bytes) -> tuple[list[RawEvent], int]:
    """The events of `rest` + `chunk` up to the last event boundary in chunk that decodes, and where in
    chunk that boundary is (0: none in it). One copy: the decoder's input is joined from the two."""
    skip = len(rest) - len(rest.lstrip(_SPACE + b","))   # the `,` after the event decoded before
    head = memoryview(rest)[skip:]
    cut = _cut(chunk)
    for _ in range(RETRIES):
        if not cut:
            return [], 0
        try:
            return _DECODE(b"".join((b"[", head, memoryview(chunk)[:cut], b"]"))), cut
        except msgspec.DecodeError:
            cut = _cut(chunk, cut - 1)
    raise NotFastLayout("no event boundary that decodes")


def batches(stream, first: bytes, after: list[bytes]):
    """Yield lists of RawEvents from a stream positioned inside `traceEvents` (`first`: bytes already
    read after its `[`), to its end; `after` gets the bytes that follow the `]` closing the list (the
    top-level keys a re-saved trace writes after its events)."""
    rest = first  # bytes read after the last event decoded
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            break
        events, cut = _decode_to(rest, chunk)
        if cut:
            yield events
            rest = chunk[cut:]
        else:  # no boundary in this chunk (an event larger than a chunk): read on
            rest += chunk
            if len(rest) > 8 * CHUNK:
                raise NotFastLayout("no event boundary found in the layout expected")
    # what is left: the last event, the `]` closing the list, and what follows it
    end, close = _last_event_end(rest)
    if end < 0:
        raise NotFastLayout("no end of traceEvents")
    yield _batch(rest[:end])
    after.append(rest[close:])


_CLOSE = re.compile(rb"\}\s*\]")


def _last_event_end(buf: bytes) -> tuple[int, int]:
    """The end of the last event, the first `}` followed by the `]` closing the list after which the
    events decode (a `}]` inside the last event's args does not), and the end of that `]`; (0, …) for an
    empty list; (-1, -1) when there is none."""
    stripped = buf.lstrip(_SPACE + b",")
    if stripped[:1] == b"]":
        return 0, len(buf) - len(stripped) + 1
    for m in _CLOSE.finditer(buf):
        try:
            _batch(buf[:m.start() + 1])
        except NotFastLayout:
            continue
        return m.start() + 1, m.end()
    return -1, -1
