"""The fast path (msgspec, Kineto's layout) and the general streaming parser (ijson) give the same
trace on the shared traces, and the same report; a layout the fast path does not know falls back."""
from __future__ import annotations

import gzip
import json

import pytest

from conftest import TRACES, needs_shared
from perfaudit.api import analyze
from perfaudit.errors import TraceError
from perfaudit.report.json_report import to_dict
from perfaudit.trace import parser
from perfaudit.trace.parser import load_trace

SHARED = sorted(p for p in TRACES.rglob("*.json.gz")) if TRACES.exists() else []
# the general parser reads ~3 MB/s: the traces over 1 MB gzipped (4-12 s each) repeat the producers and
# layouts of smaller ones (HTA's A100/V100 exports, PARAM's Kineto traces, TraceLens' H100 inference);
# the fast path reads them in every golden test, and the next test compares a whole report on one
COMPARED = [p for p in SHARED if p.stat().st_size < 1_000_000]


def _same(a, b) -> None:
    assert a.host == b.host and a.device == b.device and a.python == b.python
    assert a.meta == b.meta and a.memory == b.memory and a.skipped_events == b.skipped_events
    assert a.steps == b.steps and a.step_source == b.step_source


@pytest.mark.parametrize("path", COMPARED, ids=lambda p: str(p.relative_to(TRACES)))
def test_fast_path_and_general_parser_agree_on_the_shared_traces(path, monkeypatch):
    needs_shared(path)
    assert parser._parse_fast(str(path)).host  # the fast path itself reads it (no silent fallback)
    _same(load_trace(str(path)), load_trace(str(path), fast_path=False))


def test_the_report_is_the_same_with_either_parser(monkeypatch):
    path = str(needs_shared(TRACES / "hta" / "negative_queue_a100_rank0.json.gz"))
    fast = to_dict(analyze([path]))
    monkeypatch.setattr(parser, "_try_fast", lambda p, other_ops=(): None)
    general = to_dict(analyze([path]))
    assert fast == general and fast["findings"]


def test_other_layouts_fall_back_and_errors_read_as_before(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10 * i, "dur": 5, "pid": 1, "tid": 1,
               "args": {"Input Dims": [[2, 2], [2, 2]]}} for i in range(4)]
    truncated = tmp_path / "cut.json.gz"
    whole = gzip.decompress((TRACES / "hta" / "alexnet_a100.json.gz").read_bytes()) if TRACES.exists() else \
        json.dumps({"traceEvents": events}, indent=2).encode()
    truncated.write_bytes(gzip.compress(whole[: len(whole) // 2]))
    with pytest.raises(TraceError, match="not valid JSON or truncated"):
        load_trace(str(truncated))


def test_ranks_analysed_in_parallel_processes_give_the_same_job_report():
    folder = str(needs_shared(TRACES / "param" / "dlrm_8ranks"))
    serial, parallel = to_dict(analyze([folder], jobs=1)), to_dict(analyze([folder], jobs=2))
    assert serial == parallel
    assert "RANK001" in {f["rule"] for f in serial["findings"]} and len(serial["run"]["traces"]) == 8


def test_a_compact_trace_takes_the_fast_path_and_reads_the_same(tmp_path):
    """Written as `json.dump` writes by default (no line breaks between events), a trace is read by the fast
    path, event for event as the indented one, also when an event's args or name hold `},{` or `}]`."""
    source = TRACES / "hta" / "alexnet_a100.json.gz"
    data = json.loads(gzip.decompress(source.read_bytes())) if TRACES.exists() else {"traceEvents": []}
    odd = {"ph": "X", "cat": "user_annotation", "name": 'phase {"a": 1},{"b": [2]}]', "ts": 1, "dur": 1,
           "pid": 1, "tid": 1, "args": {"layers": [{"k": 1}, {"k": 2}], "last": [{"x": {}}]}}
    end = max((e.get("ts", 0) + e.get("dur", 0) for e in data["traceEvents"]), default=0) + 1
    data["traceEvents"] = [odd, *data["traceEvents"], dict(odd, ts=end)]
    compact, indented = tmp_path / "compact.json.gz", tmp_path / "indented.json.gz"
    compact.write_bytes(gzip.compress(json.dumps(data, separators=(",", ":")).encode()))
    indented.write_bytes(gzip.compress(json.dumps(data, indent=1).encode()))
    assert b"\n" not in gzip.decompress(compact.read_bytes())
    fast = parser._parse_fast(str(compact))  # no fallback: the fast path itself reads it
    _same(fast, parser._parse_fast(str(indented)))
    assert [(e.name, e.ts) for e in fast.host if e.name.startswith("phase {")] == [(odd["name"], 1), (odd["name"], end)]
    if TRACES.exists():  # the trace's own events as the general parser reads the original file
        general = load_trace(str(source), fast_path=False)
        def key(e):
            return e.ts, e.pid, e.tid, e.name, e.dur
        assert sorted((e for e in fast.host if not e.name.startswith("phase {")), key=key) == \
            sorted(general.host, key=key)
        assert sorted(fast.device, key=key) == sorted(general.device, key=key)


def test_every_arg_a_fact_reads_is_kept_by_the_fast_path_as_by_the_general_parser(tmp_path):
    """A convolution's shapes and its stride/padding (Concrete Inputs), a kernel's and a runtime call's
    correlation, a copy's bytes, the [memory] peaks and the host's large blocks: the fast path decodes args
    only for the events that keep some, in one call per chunk; args that are not an object are ignored, as by
    the general parser."""
    def x(cat, name, ts, args, **extra):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": 5, "pid": 1, "tid": 1, "args": args, **extra}
    events = [x("cpu_op", "aten::convolution", 10, {"Input Dims": [[8, 3, 32, 32], [16, 3, 3, 3], [16]],
                                                     "Concrete Inputs": ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]"],
                                                     "External id": 7}),
              x("cuda_runtime", "cudaLaunchKernel", 11, {"correlation": 42, "cbid": 211}),
              x("kernel", "implicit_convolve_sgemm", 20, {"correlation": 42, "grid": [1, 2, 3]}, pid=0, tid=7),
              x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 30, {"correlation": 43, "bytes": 4096},
                pid=0, tid=7),
              x("cuda_runtime", "cudaMemcpyAsync", 29, 5),           # args not an object
              x("cpu_op", "aten::mm", 40, None),                       # null args
              {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 41, "pid": 1, "tid": 1,
               "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": 1 << 20, "Total Reserved": 2 << 20}},
              {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 42, "pid": 1, "tid": 1},  # no args
              {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 43.5, "pid": 1, "tid": 1,  # a host block
               "args": {"Device Type": 0, "Device Id": -1, "Bytes": -(32 << 20), "Addr": 140098846838848,
                        "Total Allocated": 0, "Total Reserved": 0}}]
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"traceEvents": events}, indent=1))
    fast = parser._parse_fast(str(path))  # the fast path itself, no fallback
    general = load_trace(str(path), fast_path=False)
    conv = next(e for e in fast.host if e.name == "aten::convolution")
    assert conv.args == {"Input Dims": [[8, 3, 32, 32], [16, 3, 3, 3], [16]],
                         "Concrete Inputs": ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]"]}
    assert [e.args for e in fast.device] == [{"correlation": 42}, {"correlation": 43, "bytes": 4096}]
    assert fast.memory == {"cuda:0": {"peak_allocated": 1 << 20, "peak_reserved": 2 << 20}}
    assert sorted(map(repr, fast.host)) == sorted(map(repr, general.host))
    assert fast.device == general.device and fast.memory == general.memory
    assert fast.host_blocks == general.host_blocks == [(43.5, -(32 << 20), 140098846838848)]


def test_keys_after_the_events_are_read_and_the_events_are_not_read_twice(tmp_path):
    """A small trace (smaller than the tail the stream keeps) with a list before its events
    (deviceProperties) and a key after them (traceName, as Kineto re-saves): both parsers read the key
    after, and neither takes the events list itself into the metadata (`], "traceEvents": [...]` runs to
    the end of the file too)."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10 * i, "dur": 5, "pid": 1, "tid": 1}
              for i in range(3)]
    text = json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "computeMajor": 9}],
                       "traceEvents": events, "traceName": "worker0.pt.trace.json"}, indent=1)
    path = tmp_path / "small.json"
    path.write_text(text)
    for trace in (parser._parse_fast(str(path)), load_trace(str(path), fast_path=False)):
        assert trace.meta["traceName"] == "worker0.pt.trace.json"
        assert "traceEvents" not in trace.meta
        assert trace.device_properties["computeMajor"] == 9 and len(trace.host) == 3
