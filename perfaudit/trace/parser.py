"""Stream a Kineto / torch.profiler Chrome trace (plain or gzipped) into the trace model.

One pass with a C-backed JSON parser (ijson/yajl2_c): the top-level metadata that Kineto writes
before `traceEvents` is read from the head of the stream, then events are built one at a time and
only the fields analyses use are kept.
"""
from __future__ import annotations

import io
import os
from math import isfinite

from ..errors import TraceError
from ..files import read_as_input
from ..untrusted import Unreadable, decode
from . import fast, streams
from .gc_pause import collection_paused
from .model import DEVICE_KINDS, KIND_BY_CATEGORY, OWN_RANGES, Event, Trace, emulated_run, sort_by_start, without_emulation_frames
from .op_names import ANY_OP_ARGS, OP_ARGS
from .steps import segment_steps
from .streams import _GZIP_ERRORS, MAX_EVENTS, _meta_after_events, _open, _Prepend, _Repair, _spool, meta_after_list

# Memory grows with what is kept, not with the trace: only the args the facts read are kept, and
# of the runtime calls only those that launch, copy, synchronise or allocate.
KEPT_ARGS = {
    "runtime": ("correlation",),
    "kernel": ("correlation",),
    "memcpy": ("correlation", "bytes"),
    "memset": ("correlation", "bytes"),
}
_RUNTIME_KEPT = ("Launch", "Memcpy", "Memset", "Synchronize", "Malloc", "Free", "cudaGraphLaunch")
_NO_ARGS: dict = {}  # shared by every event without kept args; never mutated
_names: dict[str, str] = {}  # one string object per distinct event name
_HEAD_LIMIT = 64 << 20  # metadata before traceEvents larger than this is not a Kineto trace
# load_trace(op_shapes=WHEN_EMULATED): the op shapes kept where the trace's own metadata (read before its events)
# says perfaudit recorded it on the emulated CUDA device, whose projection reads them
WHEN_EMULATED = "when emulated"


def _op_args(other_ops: tuple | str, trace: Trace) -> tuple:
    if other_ops == WHEN_EMULATED:
        return ANY_OP_ARGS if emulated_run(trace) else ()
    return other_ops  # type: ignore[return-value]


def _read_head(stream) -> tuple[dict, bytes, str]:
    """Read up to the `traceEvents` key; return (metadata, bytes read, ijson prefix for events)."""
    buf = b""
    while True:
        chunk = stream.read(1 << 16)
        buf += chunk
        stripped = buf.lstrip()
        if stripped[:1] == b"[":
            return {}, buf, "item"
        if stripped and stripped[:1] != b"{":
            raise TraceError("not a JSON trace: it does not start with '{' or '['")
        idx = buf.find(b'"traceEvents"')
        if idx >= 0:
            head = buf[:idx].rstrip()
            if head.endswith(b","):
                head = head[:-1]
            try:  # the shared reader of untrusted JSON: any nesting, numbers, bytes give a dict or Unreadable
                meta = decode(head.decode("utf-8", "replace") + "}", dict, "JSON metadata")
            except Unreadable as exc:  # odd metadata: analyses work without it, and the report says so
                meta = {streams.UNREADABLE_META: [f"the metadata before the events is {exc}"]}
            return meta, buf, "traceEvents.item"
        if not chunk or len(buf) > _HEAD_LIMIT:
            if not buf.strip():
                raise TraceError("trace file is empty")
            raise TraceError("not a Kineto trace: no `traceEvents` list found")


LARGE_BLOCK = 1 << 20   # host blocks kept (bytes): smaller ones are reused from the heap, freed at no cost
MAX_BLOCKS = 1_000_000  # kept at most: memory stays bounded


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


_kinds: dict = {}  # raw category -> kind, memoised (a handful of distinct values per trace)
_runtime: dict[str, bool] = {}


def _runtime_kept(name: str) -> bool:
    kept = _runtime.get(name)
    if kept is None:
        kept = _runtime[name] = any(k in name for k in _RUNTIME_KEPT)
    return kept


def _kind(cat) -> str | None:
    try:
        return _kinds[cat]
    except KeyError:
        kind = KIND_BY_CATEGORY.get(cat.lower()) if isinstance(cat, str) else None
        _kinds[cat] = kind
        return kind
    except TypeError:  # an unhashable category
        return None


def _own_range_kind(kind: str, name: str) -> str:
    """perfaudit's own ranges (model.OWN_RANGES), which a fast record function files as ops, are annotations."""
    return "annotation" if kind == "op" and name.startswith(OWN_RANGES) else kind


_NUMBERS = (int, float)


def _to_event(raw, other_ops: tuple = ()) -> Event | None:
    """Normalise one raw event (a dict from the general parser), or None when it is not a complete
    event we analyse. `other_ops`: the args kept of ops OP_ARGS does not name."""
    if type(raw) is not dict or raw.get("ph") != "X":
        return None
    return _complete(raw.get("cat"), raw.get("name"), raw.get("ts"), raw.get("dur"), raw.get("pid"),
                     raw.get("tid"), raw.get("args"), other_ops)


def _complete(cat, name, ts, dur, pid, tid, args, other_ops: tuple = ()) -> Event | None:
    """A complete ("X") event from its fields (the general parser; the fast path inlines this)."""
    kind = _kind(cat)
    if kind is None or type(name) is not str:
        return None
    kind = _own_range_kind(kind, name)
    if kind == "runtime" and not _runtime_kept(name):
        return None  # cudaEventQuery, cudaGetDevice, …: no fact reads them
    if type(ts) not in _NUMBERS or type(dur) not in _NUMBERS or dur < 0:
        raise ValueError("bad ts/dur")
    kept = _NO_ARGS
    if args:
        keys = KEPT_ARGS.get(kind, OP_ARGS.get(name, other_ops) if kind == "op" else ())
        if keys:
            if type(args) is dict:
                kept = {key: args[key] for key in keys if key in args} or _NO_ARGS
    name = _names.setdefault(name, name)
    return Event(kind, name, float(ts), float(dur), pid, tid, kept)


def _memory_event(raw: dict, trace: Trace) -> None:
    """Track peak allocated/reserved bytes per device from profile_memory's [memory] events, and keep the
    host's large blocks (an emulated run's device tensors: projection/host/frees.py)."""
    args = raw.get("args")
    if not isinstance(args, dict):
        return
    if args.get("Device Type") == 0:  # the CPU
        nbytes, ts, addr = _number(args.get("Bytes")), _number(raw.get("ts")), args.get("Addr")
        if (nbytes is not None and ts is not None and abs(nbytes) >= LARGE_BLOCK and type(addr) is int
                and isfinite(nbytes) and isfinite(ts) and len(trace.host_blocks) < MAX_BLOCKS):
            trace.host_blocks.append((float(ts), int(nbytes), addr))
        return
    if args.get("Device Type") != 1:  # 1: CUDA (and ROCm)
        return
    key = f"cuda:{args.get('Device Id', 0)}"
    peaks = trace.memory.setdefault(key, {"peak_allocated": 0, "peak_reserved": 0})
    for field, arg in (("peak_allocated", "Total Allocated"), ("peak_reserved", "Total Reserved")):
        value = _number(args.get(arg))
        if value is not None and value > peaks[field]:
            peaks[field] = int(value)


def _events(stream, prefix: str, trace: Trace, other_ops: tuple = ()):
    import ijson
    host, device, python = trace.host.append, trace.device.append, trace.python.append
    to_event = _to_event
    lists = (trace.host, trace.device, trace.python)
    for raw in ijson.items(stream, prefix, use_float=True):
        if trace.dropped_events or len(lists[0]) + len(lists[1]) + len(lists[2]) >= MAX_EVENTS:
            trace.dropped_events += 1  # memory stays bounded; the report says how many were not read
            continue
        try:
            ev = to_event(raw, other_ops)
        except ValueError:
            trace.skipped_events += 1
            continue
        if ev is None:
            if isinstance(raw, dict) and raw.get("ph") == "i" and raw.get("name") == "[memory]":
                _memory_event(raw, trace)
            continue
        kind = ev.kind
        if kind in DEVICE_KINDS:
            device(ev)
        elif kind == "python":
            python(ev)
        else:
            host(ev)


def _parse_once(path: str, repair: bool, other_ops: tuple | str = ()) -> Trace:
    with _open(path) as f:
        stream = _Repair(f) if repair else f
        meta, head, prefix = _read_head(stream)
        trace = Trace(path=path, meta=meta)
        reader = io.BufferedReader(_Prepend(head, stream), 1 << 20)
        _events(reader, prefix, trace, _op_args(other_ops, trace))
        if prefix == "traceEvents.item":
            _meta_after_events(f, meta)
        if repair:
            trace.repaired_names = stream.repaired_names
    trace.unreadable_meta = meta.pop(streams.UNREADABLE_META, [])
    return trace


def _try_fast(path: str, other_ops: tuple | str) -> Trace | None:
    """The trace by the fast path, or None: then the general parser reads it (and names any error)."""
    try:
        return _parse_fast(path, other_ops)
    except (TraceError, fast.NotFastLayout, ValueError, OSError, *_GZIP_ERRORS):
        return None


def _parse_general(path: str, other_ops: tuple | str = ()) -> Trace:
    import ijson  # the general path only: a trace in Kineto's layout never needs it
    try:
        try:
            return _parse_once(path, False, other_ops)
        except (ijson.JSONError, UnicodeDecodeError) as first:  # yajl lets an overlong UTF-8 form through
            try:  # what a torch version is known to write wrong, put right; else the first error stands
                return _parse_once(path, True, other_ops)
            except ijson.JSONError:
                if isinstance(first, UnicodeDecodeError):
                    raise TraceError(f"{path}: not valid UTF-8 ({first.reason})") from None
                raise first from None
    except TraceError:
        raise
    except _GZIP_ERRORS as exc:
        raise TraceError(f"{path}: truncated or corrupt gzip ({exc})") from exc
    except ijson.IncompleteJSONError as exc:
        said = str(exc).strip().splitlines()[0] if str(exc).strip() else "unexpected end"
        raise TraceError(f"{path}: not valid JSON or truncated ({said})") from exc
    except ijson.JSONError as exc:
        raise TraceError(f"{path}: not valid JSON ({exc})") from exc
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _fast_events(stream, first: bytes, trace: Trace, after: list[bytes], other_ops: tuple = ()) -> None:
    """_complete's work inlined for the fast path (the per-event loop is most of the parse time): what an
    event's category and name decide (kept or not, its kind, the list it goes to, the args it keeps, one
    string object for its name) is worked out once per distinct (category, name), not per event; the args
    of a chunk's kept events are decoded together. `after` gets the bytes after the events' list."""
    lists = {"device": trace.device, "python": trace.python}
    no_args, numbers, event = _NO_ARGS, _NUMBERS, Event
    decided: dict = {}  # category -> name -> (kind, append, args keeper, name) or None (not kept)

    def decide(cat, name):
        kind = _kind(cat)
        if kind is None or type(name) is not str or (kind == "runtime" and not _runtime_kept(name)):
            verdict = None
        else:
            kind = _own_range_kind(kind, name)
            keys = KEPT_ARGS.get(kind, OP_ARGS.get(name, other_ops) if kind == "op" else ())
            verdict = (kind, lists.get(_PLACE.get(kind), trace.host).append, keys and fast.keeper(keys),
                       _names.setdefault(name, name))
        try:
            decided.setdefault(cat, {})[name] = verdict
        except TypeError:  # an unhashable category or name: decided again each time
            pass
        return verdict

    for batch in fast.batches(stream, first, after):
        if trace.dropped_events or len(trace.host) + len(trace.device) + len(trace.python) >= MAX_EVENTS:
            trace.dropped_events += len(batch)  # memory stays bounded; the report says how many were not read
            continue
        keeping, raws = [], []  # events whose args a fact reads, and those args undecoded
        for raw in batch:
            if raw.ph != "X":
                if raw.ph == "i" and raw.name == "[memory]":
                    _memory_event({"ts": raw.ts, "args": fast.kept_args(fast.one_args(raw.args), _MEMORY_ARGS)},
                                  trace)
                continue
            try:
                verdict = decided[raw.cat][raw.name]
            except (KeyError, TypeError):
                verdict = decide(raw.cat, raw.name)
            if verdict is None:
                continue
            kind, add, keep, name = verdict
            ts, dur = raw.ts, raw.dur
            if type(ts) not in numbers or type(dur) not in numbers or dur < 0:
                trace.skipped_events += 1
                continue
            ev = event(kind, name, float(ts), float(dur), raw.pid, raw.tid, no_args)
            if keep and raw.args:
                keeping.append((ev, keep))
                raws.append(raw.args)
            add(ev)
        if raws:
            for (ev, keep), args in zip(keeping, fast.decode_args(raws)):
                ev.args = keep(args) or no_args


_MEMORY_ARGS = ("Device Type", "Device Id", "Total Allocated", "Total Reserved", "Bytes", "Addr")
_PLACE = {**{k: "device" for k in DEVICE_KINDS}, "python": "python"}


def _after_bracket(buf: bytes, stream) -> bytes:
    """The bytes after the `[` that opens traceEvents (`buf`: the bytes read after its key; more are read
    from the stream when needed)."""
    while True:
        stripped = buf.lstrip()
        if stripped[:1] == b":":
            rest = stripped[1:].lstrip()
            if rest[:1] == b"[":
                return rest[1:]
            if rest:
                raise fast.NotFastLayout("traceEvents is not a list")
        elif stripped:
            raise fast.NotFastLayout("unexpected bytes after traceEvents")
        chunk = stream.read(1 << 12)
        if not chunk:
            raise fast.NotFastLayout("no traceEvents list")
        buf += chunk


def _parse_fast(path: str, other_ops: tuple | str = ()) -> Trace:
    with _open(path) as f:
        meta, head, prefix = _read_head(f)
        if prefix != "traceEvents.item":
            raise fast.NotFastLayout("not a traceEvents object")
        trace = Trace(path=path, meta=meta)
        key = head.find(b'"traceEvents"')
        after: list[bytes] = []
        _fast_events(f, _after_bracket(head[key + len(b'"traceEvents"'):], f), trace, after,
                     _op_args(other_ops, trace))
        meta_after_list(after[0], meta)
    trace.unreadable_meta = meta.pop(streams.UNREADABLE_META, [])
    return trace


def load_trace(path: str, fast_path: bool = True, op_shapes: bool | str = False) -> Trace:
    """Parse a trace file into the model: the fast path for Kineto's layout, the general streaming
    parser for anything else (identical results). A pipe (`-` for standard input, /dev/stdin, a FIFO) is
    read into a temporary file first. `op_shapes`: keep every op's input shapes and dtypes (a projection
    from a CPU trace reads them; a GPU trace's kernels say what they cost; WHEN_EMULATED: where the trace was
    recorded on the emulated CUDA device). Raises TraceError with a one-line reason."""
    path = os.fspath(path)
    read_as_input(path)
    spooled = _spool(path)
    try:
        with collection_paused():
            kept = op_shapes if op_shapes == WHEN_EMULATED else ANY_OP_ARGS if op_shapes else ()
            trace = _load(spooled or path, fast_path, kept)
    finally:
        if spooled:
            os.remove(spooled)
    if spooled:
        trace.path = path
    return trace


def _load(path: str, fast_path: bool, other_ops: tuple | str) -> Trace:
    trace = _try_fast(path, other_ops) if fast_path else None
    if trace is None:
        trace = _parse_general(path, other_ops)
    if not (trace.host or trace.device or trace.python):
        raise TraceError(f"{path}: the trace holds no profiler events")
    for events in (trace.host, trace.device, trace.python):
        sort_by_start(events)
    if emulated_run(trace):
        trace.python = without_emulation_frames(trace.python, trace.emulation_frames)
    segment_steps(trace)
    return trace
