"""A script that runs out of GPU memory: what held the memory at that moment, from the allocator snapshot an
H200 took at a real OOM (tests/data/h200_runs/, no GPU needed here), as the report says it."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfaudit.collect.probes import oom
from perfaudit.collect.run.runner import RunOptions, RunResult
from perfaudit.outcome import at_oom, describe
from perfaudit.report.json_report import report_from_dict
from perfaudit.report.markdown import render as markdown
from perfaudit.usecases.audit import run_notes

DATA = Path(__file__).parent / "data" / "h200_runs"
GB = 1e9


def _fixture() -> dict:
    with gzip.open(DATA / "oom_snapshot.json.gz", "rt") as f:
        return json.load(f)


def test_a_real_oom_snapshot_is_summed_by_the_lines_that_allocated_the_blocks():
    """benchmarks/gpu_oom_fixture.py on an H200: big_vocab_lm.py (batch 128 x 2048 tokens, a 50304-token
    vocabulary) ran out in backward. The live blocks sum to what torch had allocated; the largest is the
    log-softmax cross_entropy kept for backward (52.7 GB, at the loss line), then the MLPs' activations; the
    gradient backward had just made (52.7 GB, on autograd's thread) has no line of the script's."""
    f = _fixture()
    summary = oom.live_blocks_at_oom(f["snapshot"], f["device"], {int(a): c for a, c in f["categories"].items()})
    assert 0 <= f["max_allocated"] - summary["allocated_bytes"] < 4 * 1024 ** 2  # torch's peak counter: a few MB freed
    assert summary == {k: f["result"][k] for k in summary}  # what the watch reported on the GPU
    top = summary["top_sites"][0]
    assert top["path"].endswith("big_vocab_lm.py") and top["line"] == 46 and top["bytes"] > 52 * GB
    assert [s["line"] for s in summary["top_sites"][:3]] == [46, 31, 28]
    assert summary["unattributed_bytes"] == f["result"]["requested_bytes"] == 52_747_567_104
    assert summary["by_category"]["parameters"] == 261_730_304 and set(summary["by_category"]) == {"other", "parameters"}
    assert summary["reserved_bytes"] >= summary["allocated_bytes"]


def test_the_report_of_a_real_oom_run_names_the_lines_and_the_totals():
    """`perfaudit run big_vocab_lm.py` on the H200, read back from its JSON: the outcome line says the error,
    the line that raised it, and what held the memory, by kind and by line."""
    report = report_from_dict(json.loads((DATA / "oom_run.json").read_text()))
    assert report is not None and report.script_failed
    said = describe(report.outcome)
    assert said is not None
    assert "OutOfMemoryError" in said and "big_vocab_lm.py:55" in said
    assert "at the OOM 141.28 GB was allocated and 141.30 GB reserved of the GPU's 150.11 GB" in said
    assert "52.75 GB more was asked for" in said
    assert "held by activations, batches, temporaries 141.02 GB, parameters 0.26 GB" in said
    assert "allocated most at " in said and "big_vocab_lm.py:46 (52.75 GB)" in said  # the path: the H200's checkout
    assert "52.75 GB with no line of the script's (allocated by backward" in said
    assert "big_vocab_lm.py:46 (52.75 GB)" in markdown(report)


def test_an_oom_in_the_measured_steps_points_at_the_warm_up_lines():
    """The same script doubling its batch each step ran out at step 5 (batch 128), in the measured steps,
    where the allocator's stacks are not recorded: the persistent blocks keep their lines (the optimizer's
    state, the parameters), the rest is said to have none, and where the lines are (the memory row)."""
    data = json.loads((DATA / "oom_late_run.json").read_text())
    said = describe(report_from_dict(data).outcome)
    assert said is not None and "after 3 recorded step(s)" in said
    assert "optimizer state 0.53 GB" in said and "big_vocab_lm.py:59 (0.53 GB)" in said
    assert "88.54 GB with no line of the script's (allocated in the measured steps" in said
    top = data["memory"]["top_sites"][0]  # the warm-up steps' peak, measured: the loss and the logits
    assert top["line"] == 47 and top["bytes"] > 26 * GB


def test_the_emulated_device_is_not_blamed_for_a_real_gpus_oom():
    """The H200 run's outcome (no trace: it ran out in the first step). perfaudit's default device is the
    emulated one, which a GPU leaves unused: the note that an emulated device may have caused the error is for
    runs that used it."""
    outcome = json.loads((DATA / "oom_run.json").read_text())["run"]["outcome"]
    options = RunOptions(device="emulate-cuda")

    def notes(emulated):
        result = RunResult("big_vocab_lm.py", "/tmp/run", None, outcome, "/tmp/run/script.log",
                           probes={"environment": {"emulated_cuda": emulated}})
        return [n for n in run_notes(result, options, None) if "emulated CUDA device" in n]
    assert notes(False) == []
    assert len(notes(True)) == 1  # the same error on an emulated run: the emulation is a suspect


class _FakeCuda:
    """torch's OOM observer, history and snapshot calls, as a GPU answers them (the watch's own logic under
    test: when it records, when it pauses, what it adds to the script's end)."""

    def __init__(self, monkeypatch, snapshot: dict):
        self.history: list = []
        self.observers: list = []
        monkeypatch.setattr(oom.torch.cuda, "_lazy_call", lambda fn: fn())
        monkeypatch.setattr(oom.torch._C, "_cuda_attach_out_of_memory_observer", self.observers.append, raising=False)
        monkeypatch.setattr(oom.torch._C, "_cuda_isHistoryEnabled", lambda: bool(self.history and self.history[-1]),
                            raising=False)
        monkeypatch.setattr(oom.torch.cuda.memory, "_record_memory_history",
                            lambda enabled=None, **_: self.history.append(enabled))
        monkeypatch.setattr(oom.torch.cuda.memory, "_snapshot", lambda: snapshot)
        monkeypatch.setattr(oom.torch.cuda, "get_device_properties", lambda d: type("P", (), {"total_memory": 80 << 30}))


def _snapshot(line: int) -> dict:
    frames = [{"filename": "/home/u/train.py", "line": line, "name": "step"}]
    return {"segments": [{"device": 0, "total_size": 4 << 30, "blocks": [
        {"address": 1, "size": 3 << 30, "state": "active_allocated", "frames": frames},
        {"address": 2, "size": 1 << 29, "state": "inactive", "frames": frames}]}]}


def test_the_watch_records_stacks_until_the_measured_steps_and_reports_only_an_oom(monkeypatch):
    cuda = _FakeCuda(monkeypatch, _snapshot(12))
    watch = oom.OomWatch(lambda: [])
    watch.install()
    assert cuda.history == ["state"] and len(cuda.observers) == 1 and watch.keeps_history
    cuda.observers[0](0, 2 << 30, 4 << 30, 1 << 20)
    ended = {"outcome": "raised", "exception": "OutOfMemoryError", "message": "CUDA out of memory. Tried to..."}
    watch.attach(ended)
    assert ended["oom"]["top_sites"][0]["line"] == 12 and ended["oom"]["lines_recorded"] is True
    assert ended["oom"]["allocated_bytes"] == 3 << 30 and ended["oom"]["requested_bytes"] == 2 << 30
    other = {"outcome": "raised", "exception": "ValueError", "message": "bad shape"}
    watch.attach(other)  # the script caught the OOM and failed later of something else
    assert "oom" not in other
    watch.pause()
    assert cuda.history == ["state", None]
    cuda.observers[0](0, 2 << 30, 4 << 30, 1 << 20)
    assert watch.at_oom is not None and watch.at_oom["lines_recorded"] == "until the measured steps"
    assert watch.snapshot() == {"ooms_seen": 2, "history": "paused"}


def test_the_watch_leaves_a_scripts_own_history_on(monkeypatch):
    cuda = _FakeCuda(monkeypatch, _snapshot(7))
    cuda.history.append("all")  # the script's own _record_memory_history, before CUDA started
    watch = oom.OomWatch(lambda: [])
    watch.install()
    watch.pause()
    assert cuda.history == ["all"] and not watch.keeps_history


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids,
                                                                                       max_size=5), max_leaves=30)
keys = st.sampled_from(["segments", "blocks", "frames", "device", "state", "size", "address", "total_size",
                        "filename", "line", "active_allocated"])
snapshot_like = st.recursive(st.none() | st.integers() | st.sampled_from(["active_allocated", "/home/u/train.py"]),
                             lambda kids: st.lists(kids, max_size=4) | st.dictionaries(keys, kids, max_size=6),
                             max_leaves=40)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=st.dictionaries(keys, snapshot_like, max_size=3))
def test_any_snapshot_shape_is_summed_without_an_error(snapshot):
    out = oom.live_blocks_at_oom(snapshot, 0, {})
    assert out["allocated_bytes"] >= out["unattributed_bytes"] >= 0
    assert sum(s["bytes"] for s in out["top_sites"]) <= out["allocated_bytes"]


@settings(max_examples=200, deadline=None)
@given(value=st.dictionaries(st.sampled_from(["allocated_bytes", "reserved_bytes", "device_total_bytes",
                                              "requested_bytes", "by_category", "top_sites", "lines_recorded",
                                              "unattributed_bytes"]), json_values, max_size=8))
def test_a_hand_edited_oom_record_is_said_in_one_line(value):
    said = describe({"outcome": "raised", "exception": "OutOfMemoryError", "message": "CUDA out of memory",
                     "oom": value})
    assert said is not None and "\n" not in said
    assert isinstance(at_oom(value), str)
