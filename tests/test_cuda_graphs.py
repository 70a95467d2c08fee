"""CUDA graphs on the emulated device (issue 38: serve what a GPU serves): a captured step replays what eager code
computes, its replays are the run's steps, and the projection launches a replay's kernels at once."""
from __future__ import annotations

import json
from pathlib import Path

from conftest import ROOT, perfaudit


def test_captured_steps_and_graphed_callables_replay_what_eager_code_computes(tmp_path):
    """The docs' whole-step capture (capturable Adam) and make_graphed_callables, each against an eager twin, on
    the emulated device; a read of a device value inside a capture raises the GPU's error (the script checks all
    three and exits with an AssertionError on any difference: it must reach its end)."""
    script = ROOT / "tests" / "scripts" / "cuda_graphs_match_eager.py"
    report = tmp_path / "report.json"
    proc = perfaudit("run", str(script), "--full", "--out-dir", str(tmp_path / "run"), "-f", f"json={report}",
                     cwd=tmp_path)
    run = json.loads(report.read_text())["run"]
    assert run["device"] == "cpu, CUDA path emulated", run["device"]
    log = (tmp_path / "run" / "script.log").read_text()
    assert "cuda graphs: all match" in log, proc.stdout[-2000:] + log[-3000:]
    assert "a read in a capture: CUDA error: operation not permitted when stream is capturing" in log


def test_replays_are_the_steps_and_a_replay_is_one_launch_in_the_projection(realistic_reports, tmp_path):
    """A trainer that captures its step replays it for every batch and never calls optimizer.step() again: the
    replays are the measured steps, on the emulated device. Projected onto the GPU, the same trainer run eagerly
    (its `--no-graphs`) is host-bound, launching each kernel; the graphed one launches each replay once, so the
    host's share falls and the step is shorter."""
    graphed = realistic_reports["cuda_graph_trainer.py"]["run"]
    assert graphed["run"]["device"] == "cpu, CUDA path emulated"
    assert graphed["run"]["steps"] >= 3 and graphed["run"]["outcome"]["step_source"] == "optimizer"
    script = ROOT / "tests" / "realistic" / "cuda_graph_trainer.py"
    report = tmp_path / "eager.json"
    perfaudit("run", str(script), "--out-dir", str(tmp_path / "run"), "-f", f"json={report}", "--", "--no-graphs",
              cwd=Path(script).parent)
    eager = json.loads(report.read_text())
    g, e = graphed["projection"], eager["projection"]
    assert e["bottleneck"] == "host" and e["idle_ms"]["host"] > 0.3, e
    assert g["idle_ms"]["host"] < e["idle_ms"]["host"] / 5 and g["step_ms"] < e["step_ms"], (g, e)
    assert g["bottleneck"] != "host", g


def test_an_update_captured_in_the_graph_is_judged_from_its_replays(realistic_reports):
    """The trainer's Adam (capturable, built without fused=) steps only inside the graph's replays: no
    Optimizer.step range of its own after the capture. The capture keeps the range around the update, each
    replay opens it again, and OPT001 reads the foreach update a GPU runs there, at the line that built it, with
    its projected saving (it was skipped: "no Optimizer.step ranges in the measured steps")."""
    path = ROOT / "tests" / "realistic" / "cuda_graph_trainer.py"
    built = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "torch.optim.Adam(" in text)
    report = realistic_reports[path.name]["run"]
    [opt] = [f for f in report["findings"] if f["rule"] == "OPT001"]
    assert [loc["line"] for loc in opt["locations"]] == [built], opt["locations"]
    assert opt["severity"] == "info" and "foreach on the CUDA path, fused available" in opt["message"], opt
    # projected: what the fused kernel saves on the target, none where its step waits for the DataLoader
    assert opt["cost"]["ms_per_step"] > 0 and opt["projected_ms_per_step"] is not None, opt
