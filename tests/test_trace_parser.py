"""The one parser: every shared trace, every generation, and broken files with a clear error."""
from __future__ import annotations

import gzip
import json

import pytest

from conftest import TRACES, needs_shared
from perfaudit.errors import TraceError
from perfaudit.trace import load_trace

SHARED_TRACES = sorted(TRACES.rglob("*.json.gz")) if TRACES.exists() else []


@pytest.mark.parametrize("path", SHARED_TRACES, ids=lambda p: str(p.relative_to(TRACES)))
def test_every_shared_trace_parses(path):
    trace = load_trace(str(path))
    assert trace.host and trace.steps
    assert trace.step_source in ("ProfilerStep", "optimizer", "dataloader", "backward", "whole-trace")


def test_steps_without_profilerstep_come_from_optimizer_annotations():
    trace = load_trace(str(needs_shared(TRACES / "param" / "linear_2080ti.json.gz")))
    # 40 optimizer steps: 39 iterations between them (the part before the first is no whole iteration)
    assert trace.step_source == "optimizer" and len(trace.steps) == 39


def _trace(events, **meta) -> dict:
    return {"schemaVersion": 1, **meta, "traceEvents": events}


OLD_GENERATION = [
    {"ph": "X", "cat": "Operator", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "Operator", "name": "aten::_local_scalar_dense", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
    {"ph": "X", "cat": "Runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1, "ts": 11, "dur": 3,
     "args": {"correlation": 7}},
    {"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20, "dur": 30, "args": {"correlation": 8}},
    {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, "ts": 60,
     "dur": 4, "args": {"bytes": 1024}},
]


def test_old_capitalised_categories(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(_trace(OLD_GENERATION)))
    trace = load_trace(str(path))
    assert [e.kind for e in trace.host] == ["op", "op", "runtime"]
    assert {e.kind for e in trace.device} == {"kernel", "memcpy"}
    assert trace.steps[0].number == 3 and trace.has_gpu


def test_invalid_utf8_in_names(tmp_path):
    raw = json.dumps(_trace(OLD_GENERATION)).encode().replace(b'"k"', b'"k\xff\xfe"')
    path = tmp_path / "bad-utf8.json.gz"
    path.write_bytes(gzip.compress(raw))
    trace = load_trace(str(path))
    assert any(e.name.startswith("k") for e in trace.device)


def test_bare_quotes_in_names_as_torch_2_9_writes_them(tmp_path):
    """torch 2.9 exports a Python frame of a code object named `""` as `"name": "f.py(0): """"`."""
    lines = ['{"traceEvents": [',
             '  {',
             '    "ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,',
             '    "ts": 10, "dur": 5',
             '  },',
             '  {',
             '    "ph": "X", "cat": "python_function", "name": "torch/export/_trace.py(0): """", "pid": 1, "tid": 1,',
             '    "ts": 9, "dur": 7',
             '  }',
             ']}']
    path = tmp_path / "bare-quotes.json.gz"
    path.write_bytes(gzip.compress("\n".join(lines).encode()))
    trace = load_trace(str(path))
    assert [e.name for e in trace.host] == ["aten::mm"]
    assert [e.name for e in trace.python] == ['torch/export/_trace.py(0): """']  # the quotes kept


def test_top_level_list_format(tmp_path):
    path = tmp_path / "list.json"
    path.write_text(json.dumps(OLD_GENERATION))
    assert len(load_trace(str(path)).host) == 3


def test_malformed_events_are_skipped_and_counted(tmp_path):
    events = OLD_GENERATION + [{"ph": "X", "cat": "cpu_op", "name": "x", "ts": "soon", "dur": 1},
                               {"ph": "X", "cat": "cpu_op", "name": 5, "ts": 1, "dur": 1}, "not an event"]
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(_trace(events)))
    trace = load_trace(str(path))
    assert trace.skipped_events == 1 and len(trace.host) == 3


@pytest.mark.parametrize("content,message", [
    (b"", "empty"),
    (b"hello", "not a JSON trace"),
    (b'{"schemaVersion": 1}', "no `traceEvents`"),
    (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur"', "truncated"),
    (b'{"traceEvents": []}', "no profiler events"),
])
def test_bad_files_raise_one_clear_error(tmp_path, content, message):
    path = tmp_path / "t.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message):
        load_trace(str(path))


def test_truncated_gzip(tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_trace(OLD_GENERATION)).encode())[:60])
    with pytest.raises(TraceError, match="truncated|corrupt"):
        load_trace(str(path))


def test_missing_file():
    with pytest.raises(TraceError, match="not found"):
        load_trace("/nonexistent/trace.json")
