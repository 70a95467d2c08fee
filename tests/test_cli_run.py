"""`perfaudit run` as a user meets it: the report, the exit codes, and scripts that misbehave."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from conftest import ROOT, SAMPLES, perfaudit, survivors

SCRIPTS = ROOT / "tests" / "scripts"
SCHEMA = json.loads((ROOT / "docs" / "report-schema.json").read_text())


def run_json(tmp_path, script, *extra, timeout=300):
    out = tmp_path / "report.json"
    proc = perfaudit("run", str(script), "--warmup", "1", "--steps", "3", "--out-dir", str(tmp_path / "run"),
                     "--format", "json", "--output", str(out), *extra, timeout=timeout)
    report = json.loads(out.read_text()) if out.exists() else None
    return proc, report


def test_million_epoch_script_reports_item_at_line_18(sample_report, run_dir):
    """A script of a million epochs stops after its window; the console names the line and the fix."""
    assert sample_report("sync_bad.py")["_exit_code"] == 0
    console = (Path(run_dir) / "sync_bad.py.console.txt").read_text()
    assert "SYNC001" in console and "sync_bad.py:18" in console
    assert "per step" in console and "fix:" in console
    assert (Path(run_dir) / "sync_bad" / "trace.json.gz").exists()


def test_json_report_validates_and_analyze_of_the_saved_trace_agrees(sample_report, run_dir, tmp_path):
    report = sample_report("sync_bad.py")
    jsonschema.validate({k: v for k, v in report.items() if not k.startswith("_")}, SCHEMA)
    assert report["run"]["steps"] == 3 and report["run"]["torch"].startswith("2.")
    trace = f"{run_dir}/sync_bad/trace.json.gz"
    out = tmp_path / "again.json"
    proc = perfaudit("analyze", trace, "--format", "json", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    again = json.loads(out.read_text())
    strip = lambda r: [(f["rule"], f["severity"], f["location"]) for f in r["findings"]]  # noqa: E731
    assert strip(again) == strip(report)
    assert again["run"]["outcome"]["outcome"] == "window_complete"


def test_probe_snapshot_matches_its_description(run_dir, sample_report):
    """What the probes write is what the facts read: one schema, perfaudit/probe_schema.py."""
    from perfaudit.probe_schema import SNAPSHOT_SCHEMA
    from perfaudit.trace import load_trace
    for name in ("sync_bad", "copy_bad", "debug_bad"):
        sample_report(f"{name}.py")
        probes = load_trace(f"{run_dir}/{name}/trace.json.gz").probes["probes"]
        jsonschema.validate(probes, SNAPSHOT_SCHEMA)


@pytest.mark.parametrize("fail_on,code", [("warning", 1), ("info", 1), ("error", 0), ("never", 0)])
def test_fail_on_gate(sample_report, run_dir, fail_on, code):
    sample_report("sync_bad.py")
    proc = perfaudit("analyze", f"{run_dir}/sync_bad/trace.json.gz", "--fail-on", fail_on)
    assert proc.returncode == code


def test_script_raising_in_the_window_keeps_the_report(tmp_path):
    proc, report = run_json(tmp_path, SCRIPTS / "raise_in_window.py")
    assert proc.returncode == 3
    outcome = report["run"]["outcome"]
    assert outcome["outcome"] == "raised" and outcome["exception"] == "RuntimeError"
    assert outcome["site"]["line"] == 11
    assert report["run"]["steps"] >= 1 and (tmp_path / "run" / "trace.json.gz").exists()
    assert "Traceback" not in proc.stderr


def test_script_raising_before_the_first_step(tmp_path):
    proc = perfaudit("run", str(SCRIPTS / "raise_before_step.py"), "--out-dir", str(tmp_path))
    assert proc.returncode == 3
    assert "raised RuntimeError" in proc.stdout


@pytest.mark.parametrize("code,expected", [(0, 0), (3, 3)])
def test_sys_exit_early(tmp_path, code, expected):
    proc, report = run_json(tmp_path, SCRIPTS / "exit_early.py", "--", str(code))
    assert proc.returncode == expected
    assert report["run"]["outcome"]["outcome"] == "exited"
    assert report["run"]["outcome"]["exit_code"] == code


def test_os_exit_still_saves_the_trace(tmp_path):
    proc, report = run_json(tmp_path, SCRIPTS / "os_exit.py", "--steps", "10")
    assert proc.returncode == 3
    assert report["run"]["outcome"]["outcome"] == "os_exit"
    assert any(f["rule"] == "SYNC001" for f in report["findings"])


def test_hang_is_stopped_by_timeout_and_reports_what_it_saw(tmp_path):
    # 20 s: torch's import and five tiny steps take 10 s on a 2-core runner with four other processes on it
    proc, report = run_json(tmp_path, SCRIPTS / "hang.py", "--timeout", "20", timeout=120)
    assert proc.returncode == 3
    assert report["run"]["outcome"]["outcome"] == "timeout"
    assert report["run"]["steps"] >= 1


def test_steps_without_an_optimizer_and_script_arguments(tmp_path):
    proc, report = run_json(tmp_path, SCRIPTS / "no_optimizer.py", "--", "--lr", "0.1")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert report["run"]["outcome"]["outcome"] == "window_complete"
    assert report["run"]["outcome"]["step_source"] == "backward"


def test_two_optimizers_per_iteration_count_once(tmp_path):
    from perfaudit.trace import load_trace
    proc, report = run_json(tmp_path, SCRIPTS / "two_optimizers.py")
    assert proc.returncode == 0
    trace = load_trace(str(tmp_path / "run" / "trace.json.gz"))
    for step in trace.measured_steps:
        inside = [e for e in trace.host if e.name.startswith("Optimizer.step#") and step.ts <= e.ts <= step.end]
        assert len(inside) == 2


def test_dataloader_workers_do_not_survive(sample_report):
    """No process of that run is left: its workers carry its run folder in their environment (other tests
    run copy_bad.py at the same time, in their own folders)."""
    run_dir = sample_report("copy_bad.py")["run"]["run_dir"]
    assert not survivors("sample_scripts/copy_bad.py", run_dir)


@pytest.mark.parametrize("target,message", [
    ("does_not_exist.py", "script not found"),
    ("tests", "is a directory"),
])
def test_bad_script_path(target, message):
    proc = perfaudit("run", target)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_syntax_error_in_script(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import torch\nfor x in range(3)\n    pass\n")
    proc = perfaudit("run", str(script))
    assert proc.returncode == 2
    assert "syntax error" in proc.stderr and "broken.py:2" in proc.stderr


def test_unwritable_output_folder(tmp_path):
    locked = tmp_path / "locked"
    locked.write_text("a file, not a folder")
    proc = perfaudit("run", str(SAMPLES / "sync_good.py"), "--out-dir", str(locked / "sub"))
    assert proc.returncode == 2 and "cannot write" in proc.stderr


def test_analyze_missing_trace_is_one_line():
    proc = perfaudit("analyze", "nope.json.gz")
    assert proc.returncode == 2
    assert "not found" in proc.stderr and "Traceback" not in proc.stderr


def test_records_only_what_the_selected_rules_need(tmp_path):
    from perfaudit.trace import load_trace
    proc, report = run_json(tmp_path, SAMPLES / "debug_bad.py", "--select", "DEBUG001", "--target", "none")
    assert proc.returncode == 0 and [f["rule"] for f in report["findings"]] == ["DEBUG001"]
    trace = load_trace(str(tmp_path / "run" / "trace.json.gz"))
    assert not trace.has_stacks  # no selected rule reads stacks or shapes, no projection: the cheapest recording
    assert not any("Input Dims" in e.args for e in trace.host)


def test_a_step_gradscaler_skips_is_still_a_step(tmp_path):
    """Under float16 AMP the GradScaler skips `optimizer.step()` after an overflow; the step detector ended steps
    at optimizer steps, so a skipped iteration merged into the next: measured steps of two iterations, twice the
    time, and CUDNN002 saying the convolutions' shapes varied (each ran twice in those steps). Each iteration is
    one step, skipped or not."""
    from perfaudit.trace import load_trace
    proc, report = run_json(tmp_path, SCRIPTS / "amp_skipped_steps.py")
    assert proc.returncode == 0, proc.stdout[-2000:]
    skips = (tmp_path / "run" / "script.log").read_text().count("skipped step")
    assert skips >= 3, skips  # the premise: the scaler skipped steps during the run
    trace = load_trace(str(tmp_path / "run" / "trace.json.gz"))
    for step in trace.measured_steps:
        inside = [e for e in trace.host if e.name == "aten::_amp_update_scale_" and step.ts <= e.ts <= step.end]
        assert len(inside) == 1, (step.number, len(inside))
    assert not [f for f in report["findings"] if f["rule"] in ("CUDNN002", "SHAPE001")], report["findings"]
