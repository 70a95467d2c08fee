"""The one parser: every shared trace, every generation, and broken files with a clear error."""
from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, TRACES, needs_shared, perfaudit
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


def test_one_broken_name_does_not_cost_the_trace(tmp_path):
    """A stray quote in a kernel's name and a control character in a Python frame's (the profiler wrote a
    trace json.loads rejects, line 129342 of a run's trace in CI): `analyze` reads the rest as it is, finds
    what it finds on the intact trace, and says how many names it put right."""
    source = ROOT / "tests" / "data" / "h100_runs" / "traces" / "host_tensor_bad.json.gz"
    raw = gzip.decompress(source.read_bytes())
    kernel = raw.index(b'"cat": "kernel", "name": "') + len(b'"cat": "kernel", "name": "') + 10
    frame = raw.index(b'"cat": "python_function", "name": "') + len(b'"cat": "python_function", "name": "') + 4
    broken = raw[:frame] + b"\x07" + raw[frame:kernel] + b'"' + raw[kernel:]
    with pytest.raises(ValueError):
        json.loads(broken)
    (tmp_path / "broken.json.gz").write_bytes(gzip.compress(broken))
    reports = {}
    for name, trace in (("intact", source), ("broken", tmp_path / "broken.json.gz")):
        out = tmp_path / f"{name}.json"
        proc = perfaudit("analyze", str(trace), "-f", f"json={out}")
        assert proc.returncode == 0, proc.stderr[-2000:]
        reports[name] = json.loads(out.read_text())
    assert reports["broken"]["findings"] and \
        [f["rule"] for f in reports["broken"]["findings"]] == [f["rule"] for f in reports["intact"]["findings"]]
    assert any("2 event name(s) were not valid JSON" in n for n in reports["broken"]["notes"]), reports["broken"]["notes"]
    assert not any("not valid JSON" in n for n in reports["intact"]["notes"])


_INDENTED = b"""{"traceEvents": [
  {
    "ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
    "ts": 10, "dur": 5
  },
  {
    "ph": "X",
    "cat": "python_function",
    "name": "NAME",
    "pid": 1,
    "tid": 1,
    "ts": 9,
    "dur": 7
  }
]}"""


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=40).filter(lambda b: b"\n" not in b))
def test_any_bytes_in_a_name_leave_the_other_events_readable(tmp_path, name):
    """Whatever bytes the profiler leaves in a name (Kineto's indented layout, one field a line), the trace
    reads: the other event is there, and a name with nothing to escape is read as written."""
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(_INDENTED.replace(b"NAME", name)))
    trace = load_trace(str(path))
    assert [e.name for e in trace.host] == ["aten::mm"]
    plain = not any(c in name for c in b'"\\') and all(c >= 0x20 for c in name)
    if plain:
        assert [e.name for e in trace.python] == [name.decode("utf-8", "replace")]


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
