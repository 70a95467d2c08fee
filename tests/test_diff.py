"""`perfaudit diff A B`: two runs of a script before and after a per-step `.item()` show the step times with
an interval and the new SYNC001 at its line; two real GPU traces show which part of the step grew, the
kernels whose time changed and the environment that differs; findings are matched across an edit that
moved their line."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from conftest import ROOT, TRACES, needs_shared, perfaudit
from perfaudit.findings import Cost, Finding, Location
from perfaudit.usecases.diff import match_findings

SCHEMA = json.loads((ROOT / "docs" / "diff-schema.json").read_text())


def test_diff_of_runs_before_and_after_a_per_step_item(sample_report, run_dir, tmp_path):
    sample_report("sync_good.py")
    sample_report("sync_bad.py")
    out, md, page = tmp_path / "diff.json", tmp_path / "diff.md", tmp_path / "diff.html"
    proc = perfaudit("diff", f"{run_dir}/sync_good", f"{run_dir}/sync_bad", "-f", "console", "-f", f"json={out}",
                     "-f", f"markdown={md}", "-f", f"html={page}")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    jsonschema.validate(result, SCHEMA)
    step = result["step"]
    assert step["a_ms"] > 0 and step["b_ms"] > 0 and step["steps"] == [3, 3]
    assert step["interval_ms"][0] <= step["delta_ms"] <= step["interval_ms"][1]
    new = [f for f in result["findings"] if f["status"] == "new"]
    assert [(f["rule"], f["location"].endswith("sync_bad.py:18")) for f in new] == [("SYNC001", True)]
    assert not [f for f in result["findings"] if f["status"] == "gone"]
    assert result["ops_kind"] == "ops (self time)" and result["environment"] == []
    assert "NEW     SYNC001" in proc.stdout and "step time " in proc.stdout and "95% interval" in proc.stdout
    assert "| new | SYNC001 | `" in md.read_text() and "sync_bad.py:18" in page.read_text()
    assert "<script" not in page.read_text()


def test_diff_of_two_gpu_traces_names_the_part_that_grew_and_the_kernels(tmp_path):
    """HTA's trace-diff pair: an A100 control against a V100 test run of the same job."""
    a = needs_shared(TRACES / "hta" / "trace_diff_control_a100_rank3.json.gz")
    b = needs_shared(TRACES / "hta" / "trace_diff_test_v100_rank1.json.gz")
    out = tmp_path / "diff.json"
    proc = perfaudit("diff", str(a), str(b), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    jsonschema.validate(result, SCHEMA)
    assert {p["part"] for p in result["gpu_ms"]} >= {"compute", "idle (host-bound)"}
    grew = result["grew"]  # on GPU traces, the device's part that grew most
    assert grew["side"] == "GPU" and grew["delta_ms"] == max(p["delta_ms"] for p in result["gpu_ms"]) > 0
    assert grew["part"] == "compute"
    assert result["ops_kind"] == "kernels" and len(result["ops"]) == 10
    deltas = [abs(r["delta_ms"]) for r in result["ops"]]
    assert deltas == sorted(deltas, reverse=True)
    device = next(e for e in result["environment"] if e["key"] == "device")
    assert "A100" in device["a"] and "V100" in device["b"]
    assert "grew most: " in proc.stdout and "kernels whose time changed most" in proc.stdout


def _finding(rule: str, line: int, code: str, ms: float) -> Finding:
    return Finding(rule, rule, (), "warning", f"{rule} at {line}", "", Cost(ms, None),
                   (Location("train.py", line, code),))


def test_a_finding_moved_by_an_edit_is_the_same_finding():
    before = [_finding("SYNC001", 30, "loss.item()", 1.0), _finding("DATA001", 12, "DataLoader(ds)", 4.0)]
    after = [_finding("SYNC001", 34, "loss.item()", 1.02), _finding("DATA001", 16, "DataLoader(ds)", 9.0),
             _finding("SYNC001", 40, "acc.cpu()", 0.5)]
    changes = {(c.rule, c.where): c.status for c in match_findings(before, after)}
    assert changes == {("SYNC001", "train.py:40"): "new", ("DATA001", "train.py:16"): "changed",
                       ("SYNC001", "train.py:34"): "same"}
    gone = match_findings(after, before[:1])
    assert sorted(c.status for c in gone) == ["gone", "gone", "same"]


def _with_plain_steps(run: str, dest, wall_ms: float, waited_ms: tuple = (0.0,) * 5):
    """A copy of a run folder whose steps timed without the profiler took `wall_ms` each (a settling step first)."""
    import shutil
    shutil.copytree(run, dest)
    record = json.loads((dest / "result.json").read_text())
    record["plain_steps"] = [{"wall_ms": 3 * wall_ms, "fetch_ms": 0.0, "waited_ms": 0.0, "settling": True}] + [
        {"wall_ms": wall_ms, "fetch_ms": 0.0, "waited_ms": w, "disturbed": w > 0.1 * wall_ms} for w in waited_ms]
    (dest / "result.json").write_text(json.dumps(record))
    return str(dest)


def test_diff_states_the_steps_timed_without_the_profiler_and_why_they_disagree(sample_report, run_dir, tmp_path):
    """Both runs timed steps after their windows without the profiler: the headline is theirs (what verify times),
    the recorded steps' comparison follows, and where the two say opposite things a line says why. The unprofiled
    steps are set to go the other way from the recorded ones; a step a busy machine disturbed is left out as
    verify leaves it out (B's step that waited 1.9 of its ms for a CPU held by others)."""
    sample_report("sync_good.py")
    sample_report("sync_bad.py")
    recorded = [json.loads((Path(run_dir) / name / "report.json").read_text())["run"]["step_ms"]
                for name in ("sync_good", "sync_bad")]
    (wall_a, wall_b), verdict = ((3.0, 2.0), "faster") if recorded[0] <= recorded[1] else ((2.0, 3.0), "slower")
    a = _with_plain_steps(f"{run_dir}/sync_good", tmp_path / "a", wall_a)
    b = _with_plain_steps(f"{run_dir}/sync_bad", tmp_path / "b", wall_b, (0.0, 0.0, 0.0, 0.0, 1.9))
    out = tmp_path / "diff.json"
    proc = perfaudit("diff", a, b, "-o", str(out), "-f", "console")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    jsonschema.validate(result, SCHEMA)
    unprofiled = result["unprofiled_step"]
    assert (unprofiled["a_ms"], unprofiled["b_ms"], unprofiled["steps"]) == (wall_a, wall_b, [5, 4])
    assert unprofiled["verdict"] == verdict != result["step"]["verdict"]
    assert "perfaudit verify" in result["disagreement"]
    text = " ".join(proc.stdout.split())
    assert text.index(f"step time without the profiler {wall_a:.2f} → {wall_b:.2f} ms") < text.index(
        "as recorded under the profiler:")
    assert f"the steps timed without the profiler say {verdict}" in text


def test_diff_of_traces_alone_compares_the_recorded_steps(sample_report, run_dir, tmp_path):
    """A trace copied out of its run folder has no steps timed without the profiler (they are in the folder's
    result.json): the recorded steps make the headline."""
    import shutil
    sample_report("sync_good.py")
    sample_report("sync_bad.py")
    out = tmp_path / "diff.json"
    shutil.copy(f"{run_dir}/sync_bad/trace.json.gz", tmp_path / "copy.json.gz")
    proc = perfaudit("diff", f"{run_dir}/sync_good/trace.json.gz", str(tmp_path / "copy.json.gz"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["unprofiled_step"] is None and result["disagreement"] is None
    assert "without the profiler" not in proc.stdout
