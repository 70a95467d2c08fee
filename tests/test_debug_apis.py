"""Debugging APIs on the CUDA path (tip T07) that only a GPU run meets: the CUDA allocator's memory history.
Recorded for a few steps and turned off, as PyTorch's guide to memory snapshots does it, it is no finding; left
on (the sample memory_history_bad.py, a rule example) it is DEBUG001 at the line that turned it on."""
from __future__ import annotations

import json
import textwrap

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import perfaudit, run_trace_json
from perfaudit.static import lint_source

TRAINER = '''\
import argparse
import torch
from torch import nn


class Trainer:
    def __init__(self, model, device, snapshot):
        self.model, self.device, self.snapshot = model.to(device), device, snapshot
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)

    def fit(self, steps, record_steps):
        x = torch.randn(64, 32, device=self.device)
        y = torch.randint(0, 4, (64,), device=self.device)
        for step in range(steps):
            if step == 0 and record_steps:
                torch.cuda.memory._record_memory_history(max_entries=10_000)
            loss = nn.functional.cross_entropy(self.model(x), y)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            if step + 1 == record_steps:
                torch.cuda.memory._dump_snapshot(self.snapshot)
                torch.cuda.memory._record_memory_history(enabled=None)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--record-steps", type=int, default=1)
    p.add_argument("--snapshot", default="memory.pickle")
    args = p.parse_args()
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    Trainer(model, torch.device("cuda"), args.snapshot).fit(100_000, args.record_steps)
'''


def test_a_memory_snapshot_of_the_first_step_is_not_a_debugging_api_left_on(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(TRAINER))
    report_path = tmp_path / "report.json"
    proc = perfaudit("run", str(script), "--warmup", "2", "--steps", "3", "--out-dir", str(tmp_path / "run"),
                     "-f", f"json={report_path}", "--", "--snapshot", str(tmp_path / "memory.pickle"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(report_path.read_text())
    assert report["run"]["device"] == "cpu, CUDA path emulated"
    assert not [f for f in report["findings"] if f["rule"] == "DEBUG001"], report["findings"]
    probes = run_trace_json(tmp_path / "run" / "trace.json.gz")["perfaudit"]["probes"]
    calls = [c for c in probes["debug_apis"] if c["api"] == "_record_memory_history"]
    assert [(c["enabled"], c["site"]["line"]) for c in calls] == [(True, 16), (False, 23)]  # the script's own
    assert probes["memory_history_in_window"] is False


def test_on_a_gpu_perfaudits_own_history_never_ends_the_scripts(monkeypatch):
    """On a GPU the OOM watch keeps a "state" history through the warm-up and turns it off at its end, and the
    device-memory probe records two steps: a history the script turned on meanwhile (DEBUG001's evidence, and
    the snapshot the script will dump) is left recording. Without a GPU here: the calls are caught."""
    import torch

    from perfaudit.collect.probes import gpu_memory, oom
    calls: list = []
    monkeypatch.setattr(oom, "history_on", lambda: True)
    monkeypatch.setattr(gpu_memory, "history_on", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda *a, **k: calls.append(k))
    for scripts in (True, False):
        watch = oom.OomWatch(lambda: [], scripts_history=lambda: scripts)
        watch.keeps_history = True   # the watch's own "state" history, on since CUDA started
        watch.pause()
        assert calls == ([] if scripts else [{"enabled": None}])
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    for name in ("current_device", "synchronize", "memory_allocated", "memory_reserved"):
        monkeypatch.setattr(torch.cuda, name, lambda *a: 0)
    probe = gpu_memory.GpuMemory(lambda: [], oom.OomWatch(lambda: [], scripts_history=lambda: True))
    probe._oom.keeps_history = True
    monkeypatch.setattr(gpu_memory, "saved_tensors_watch", lambda packed: __import__("contextlib").nullcontext())
    calls.clear()
    probe.start()
    assert probe._scripts_history and calls == []   # nothing of perfaudit's own recorded over the script's


def test_lint_finds_the_history_left_on_and_leaves_one_turned_off_to_the_run():
    """`perfaudit lint` (no run) reports the history turned on and never off in the file, a warning as the run
    gives it; the trainer above, which turns it off after its first step, is the run's to judge."""
    assert [(h.rule, h.severity) for h in lint_source(textwrap.dedent(TRAINER), "train.py")
            if h.rule == "DEBUG001"] == []
    left_on = "import torch\ntorch.cuda.memory._record_memory_history(max_entries=100_000)\n"
    assert [(h.rule, h.line, h.severity) for h in lint_source(left_on, "t.py")] == [("DEBUG001", 2, "warning")]


_SWITCHES = ["", "max_entries=10", "enabled='all'", "'state'", "enabled=None", "None", "enabled=False", "flag",
             "enabled=args.history", "*opts", "**kw"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_SWITCHES), max_size=4), st.sampled_from(["torch.cuda.memory.", "", "mem."]))
def test_lint_of_any_mix_of_history_calls_flags_them_only_when_nothing_turns_it_off(switches, prefix):
    lines = ["import torch", *(f"{prefix}_record_memory_history({s})" for s in switches)]
    hits = [h.line for h in lint_source("\n".join(lines) + "\n", "t.py") if h.rule == "DEBUG001"]
    off = any(s in ("enabled=None", "None", "enabled=False", "flag", "enabled=args.history", "*opts", "**kw")
              for s in switches)
    assert hits == ([] if off else list(range(2, 2 + len(switches)))), (switches, hits)
