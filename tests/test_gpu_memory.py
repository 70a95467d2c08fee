"""Device memory on a real GPU: the allocator history an H100 recorded, replayed here (no GPU needed), and
the figures a GPU run reports, read back from a trace whatever its metadata holds."""
from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfaudit.api import analyze
from perfaudit.collect.probes.gpu_memory import peak_of_history
from perfaudit.engine.loader import load_rules

DATA = Path(__file__).parent / "data" / "h100_runs"
RULES = load_rules()


def _history() -> dict:
    with gzip.open(DATA / "allocator_history_h100.json.gz", "rt") as f:
        return json.load(f)


def test_a_real_h100_allocator_history_names_what_held_the_peak():
    """benchmarks/gpu_memory_fixture.py on an H100: a conv net (batch 64 of 64x64 images, Adam) over two
    steps. The replay reaches torch's own peak, splits it by what the blocks were, and puts the forward's
    saved activations at the line that ran the model."""
    h = _history()
    replay = peak_of_history(h["trace"], h["start"], {int(a): c for a, c in h["categories"].items()},
                             {int(a): n for a, n in h["baseline"].items()})
    # torch's counter and the history's sizes differ by a few hundred bytes of rounding (the report gives torch's)
    assert abs(replay["peak_allocated_bytes"] - h["torch_peak_allocated"]) < 1024
    assert h["result"]["peak_allocated_bytes"] == h["torch_peak_allocated"] == 407_104_512
    assert sum(replay["by_category"].values()) == replay["peak_allocated_bytes"]
    by = replay["by_category"]
    # Adam's two moments per parameter: twice the parameters' bytes (each block rounded to 512 B)
    assert by["optimizer state"] >= 2 * by["parameters"] - 2 * 512 * 10
    assert by["activations"] > 0.4 * replay["peak_allocated_bytes"]
    top = replay["top_sites"][0]
    assert top["path"].endswith("gpu_memory_fixture.py") and top["line"] == 42, top  # loss = ...(model(images))
    assert max(top["categories"], key=top["categories"].get) == "activations"


def test_a_history_replay_keeps_only_what_was_live_at_the_peak():
    line = [{"filename": "/home/u/train.py", "line": 12, "name": "step"}]
    trace = [{"action": "alloc", "addr": 1, "size": 100, "frames": line},
             {"action": "alloc", "addr": 2, "size": 50, "frames": []},        # no user frame: autograd's thread
             {"action": "free_requested", "addr": 1, "size": 100},
             {"action": "free_completed", "addr": 1, "size": 100},
             {"action": "free_requested", "addr": 9, "size": 200},            # a block from before the steps
             {"action": "alloc", "addr": 3, "size": 30, "frames": line}]
    out = peak_of_history(trace, 1000, {10: "parameters", 2: "gradients"}, {10: 800})
    assert out["peak_allocated_bytes"] == 1150
    assert out["by_category"] == {"parameters": 800, "other": 300, "gradients": 50}
    assert out["top_sites"] == [{"path": "/home/u/train.py", "line": 12, "bytes": 100, "categories": {"other": 100}}]


def test_blocks_from_before_the_steps_are_located_by_the_oom_watchs_stacks():
    """The blocks live when the steps' history began (the model, a dataset put on the GPU) carry the stacks the
    OOM watch's "state" history kept: they are counted at their lines too, under what they are."""
    model = [{"filename": "/home/u/train.py", "line": 30, "name": "<module>"}]
    data = [{"filename": "/x/site-packages/torch/nn/modules/module.py", "line": 9, "name": "to"},
            {"filename": "/home/u/data.py", "line": 8, "name": "load"}]
    trace = [{"action": "alloc", "addr": 3, "size": 30, "frames": [{"filename": "/home/u/train.py", "line": 12}]}]
    out = peak_of_history(trace, 1000, {10: "parameters"}, {10: 800, 11: 200}, {10: model, 11: data, 99: model})
    assert out["peak_allocated_bytes"] == 1030
    assert out["top_sites"] == [
        {"path": "/home/u/train.py", "line": 30, "bytes": 800, "categories": {"parameters": 800}},
        {"path": "/home/u/data.py", "line": 8, "bytes": 200, "categories": {"other": 200}},
        {"path": "/home/u/train.py", "line": 12, "bytes": 30, "categories": {"other": 30}}]


def _trace_with(device_memory) -> str:
    events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
               "ts": i * 1000, "dur": 900} for i in range(3)]
    return json.dumps({"traceEvents": events, "perfaudit": {"probes": {
        "device_memory": device_memory, "environment": {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3"}}}})


def test_a_gpu_runs_measured_memory_is_the_reports_memory(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(_trace_with({
        "measured": True, "peak_allocated_bytes": 82_052_608, "peak_reserved_bytes": 94_371_840,
        "by_category": {"other": 70_782_464, "parameters": 2_614_272}, "device_total_bytes": 85_017_493_504,
        "outside_pool_bytes": 804_061_184,
        "top_sites": [{"path": str(tmp_path / "vae.py"), "line": 74, "bytes": 2_611_296}]}))
    memory = analyze([str(path)], RULES).traces[0].memory
    assert memory["measured"] and memory["peak_reserved_bytes"] == 94_371_840
    assert memory["headroom_bytes"] == 85_017_493_504 - 94_371_840 - 804_061_184
    assert memory["top_sites"][0]["line"] == 74 and memory["target"] == "NVIDIA H100 80GB HBM3"


value = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70), st.floats(allow_nan=True),
                  st.text(max_size=4), st.lists(st.integers(), max_size=2))
site = st.dictionaries(st.sampled_from(["path", "line", "bytes", "categories"]), value, max_size=4)
hostile = st.dictionaries(
    st.sampled_from(["measured", "peak_allocated_bytes", "peak_reserved_bytes", "by_category", "top_sites",
                     "device_total_bytes", "outside_pool_bytes", "history", "start_bytes"]),
    value | st.lists(site, max_size=3) | st.dictionaries(st.text(max_size=4), value, max_size=3), max_size=9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile)
def test_hostile_measured_memory_in_a_trace_is_read_or_left_out(device_memory):
    """A trace's embedded probes are a user's file like any other: whatever `device_memory` holds, the
    trace is analysed (the part that cannot be read is left out), never a traceback."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.json"
        path.write_text(_trace_with({"measured": True, **device_memory}))
        report = analyze([str(path)], RULES)
    assert report.traces and report.traces[0].steps >= 1


class _FakeCuda:
    """torch.cuda as a GPU run's probe sees it, around the H100's recorded history: what it was asked to do."""

    def __init__(self, monkeypatch, history: dict, scripts_history: bool = False, old_torch: bool = False):
        import torch
        self.calls: list = []
        self.history = history
        self.recording = scripts_history
        cuda = torch.cuda
        for name, value in {"is_initialized": lambda: True, "current_device": lambda: 0, "synchronize": lambda: None,
                            "memory_allocated": lambda: history["start"], "memory_reserved": lambda: 600 << 20,
                            "max_memory_allocated": lambda: 900 << 20, "max_memory_reserved": lambda: 1000 << 20,
                            "mem_get_info": lambda: (70 << 30, 80 << 30), "get_device_capability": lambda d=None: (9, 0),
                            "reset_peak_memory_stats": lambda: self.calls.append("reset")}.items():
            monkeypatch.setattr(cuda, name, value)

        def record(enabled="all", **kwargs):
            if old_torch:
                raise TypeError("unexpected keyword argument 'max_entries'")
            self.calls.append(("history", enabled))
            self.recording = enabled is not None
        monkeypatch.setattr(cuda.memory, "_record_memory_history", record)
        monkeypatch.setattr(cuda.memory, "_snapshot", lambda: {"device_traces": [history["trace"]], "segments": []})
        monkeypatch.setattr(torch._C, "_cuda_isHistoryEnabled", lambda: self.recording, raising=False)


def _probe_over_the_history(fake) -> dict:
    from perfaudit.collect.probes.gpu_memory import GpuMemory
    probe = GpuMemory(lambda: [])
    probe.start()
    probe.stop()
    return probe.snapshot()


def test_the_gpu_probe_takes_the_steps_peaks_from_the_history_and_leaves_torchs_counters_alone(monkeypatch):
    """A script that logs torch.cuda.max_memory_allocated() reads its own peak after perfaudit's window: the
    probe no longer resets torch's counters; the history it records for two steps gives their peaks (within
    torch's rounding of the real H100 run's counter) and is switched off again."""
    h = _history()
    fake = _FakeCuda(monkeypatch, h)
    result = _probe_over_the_history(fake)
    assert "reset" not in fake.calls and fake.calls == [("history", "all"), ("history", None)]
    assert abs(result["peak_allocated_bytes"] - h["torch_peak_allocated"]) < 1024   # not the counter's 900 MiB
    assert result["peak_reserved_bytes"] == 600 << 20 and "peak_scope" not in result   # no segment was added


def test_a_scripts_own_allocator_history_is_left_as_it_was_and_the_peaks_say_what_they_span(monkeypatch):
    h = _history()
    fake = _FakeCuda(monkeypatch, h, scripts_history=True)
    result = _probe_over_the_history(fake)
    assert fake.calls == [] and fake.recording          # neither reconfigured nor switched off, nor reset
    assert result["peak_allocated_bytes"] == 900 << 20 and "since the script's start" in result["peak_scope"]
    path = Path(tempfile.mkdtemp()) / "t.json"
    path.write_text(_trace_with(result))
    memory = analyze([str(path)], rules=RULES).traces[0].memory
    assert "own allocator history is on" in memory["source"] and memory["peak_scope"] == result["peak_scope"]


def test_a_torch_without_the_history_falls_back_to_torchs_counters_after_a_reset(monkeypatch):
    fake = _FakeCuda(monkeypatch, _history(), old_torch=True)
    result = _probe_over_the_history(fake)
    assert fake.calls == ["reset"] and result["peak_allocated_bytes"] == 900 << 20 and "peak_scope" not in result


def test_segments_the_allocator_adds_during_the_steps_raise_the_reserved_peak():
    from perfaudit.collect.probes.gpu_memory import _segment_peak
    trace = [{"action": "segment_alloc", "size": 20 << 20}, {"action": "alloc", "size": 1 << 20},
             {"action": "segment_map", "size": 2 << 20}, {"action": "segment_free", "size": 20 << 20},
             {"action": "segment_alloc", "size": 4 << 20}]
    assert _segment_peak(trace) == 22 << 20 and _segment_peak([]) == 0


def test_cublas_workspaces_from_before_the_steps_are_named_not_put_at_a_line(monkeypatch):
    """What an H200 showed: the first matrix product's line held 33 MiB from before the steps, cuBLAS's 32 MiB
    workspace and cuBLASLt's 1 MiB, allocated by that call; backward's workspace, on autograd's thread, has
    no stack. They are cuBLAS workspace, at no line; a 1 MiB tensor made elsewhere stays the script's."""
    from perfaudit.collect.probes import gpu_memory
    monkeypatch.setattr(gpu_memory.torch.cuda, "get_device_capability", lambda device: (9, 0))
    first_matmul = [{"filename": "/home/u/train.py", "line": 41, "name": "encode"}]
    blocks = [{"address": 1, "size": 32 << 20, "frames": first_matmul},
              {"address": 2, "size": 1 << 20, "frames": first_matmul},
              {"address": 3, "size": 32 << 20, "frames": []},
              {"address": 4, "size": 1 << 20, "frames": [{"filename": "/home/u/train.py", "line": 9, "name": "x"}]},
              {"address": 5, "size": 32 << 20, "frames": first_matmul}]
    assert gpu_memory._library_workspaces(blocks, {5: "parameters"}, 0) == {1, 2, 3}
    monkeypatch.setattr(gpu_memory.torch.cuda, "get_device_capability", lambda device: (8, 0))
    assert gpu_memory._library_workspaces(blocks, {}, 0) == set()  # an A100's are 8 MiB + 128 KiB
