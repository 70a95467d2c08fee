"""Bad input and misbehaving scripts: one clear line, a distinct exit code, nothing lost."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from conftest import ROOT, perfaudit, survivors

SCRIPTS = ROOT / "tests" / "scripts"


def test_ctrl_c_reports_what_was_recorded(tmp_path):
    out = tmp_path / "report.json"
    proc = subprocess.Popen([sys.executable, "-m", "perfaudit", "run", str(SCRIPTS / "hang.py"), "--warmup", "1",
                             "--steps", "5", "--out-dir", str(tmp_path / "run"), "--format", "json", "-o", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # as from a terminal: a background job (CI) would inherit SIGINT ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    progress = tmp_path / "run" / "progress.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (progress.exists() and '"step"' in progress.read_text()):
        time.sleep(0.2)
    time.sleep(1.0)  # the script is now asleep after its last step
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    report = json.loads(out.read_text())
    assert report["run"]["outcome"]["outcome"] == "interrupted"
    assert report["run"]["steps"] >= 1 and (tmp_path / "run" / "trace.json.gz").exists()
    assert "Traceback" not in stderr


def test_ctrl_c_as_the_profiler_drops_its_stacks_keeps_the_trace(tmp_path):
    """Under a tight trace budget the profiler is stopped and another started when the first measured step
    begins (python_heavy.py under 20 MB: stacks on that step only). A Ctrl-C then, while the first profiler
    stops, used to crash the export (a profiler stopped twice): the switch finishes, then the run stops, with
    its trace and report."""
    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "perfaudit", "run", str(SCRIPTS / "python_heavy.py"),
                             "--max-trace-mb", "20", "--out-dir", str(tmp_path / "run"), "-f", f"json={out}"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    progress = tmp_path / "run" / "progress.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (progress.exists() and '"step": 2,' in progress.read_text()):
        time.sleep(0.02)  # "step": 2 is written as the warm-up ends, just before the profilers switch
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Segmentation" not in (tmp_path / "run" / "script.log").read_text()
    report = json.loads(out.read_text())
    assert report["run"]["outcome"]["outcome"] == "interrupted" and (tmp_path / "run" / "trace.json.gz").exists()
    assert report["run"]["steps"] >= 1 and "Traceback" not in stderr


def test_segfault_in_the_child(tmp_path):
    proc = perfaudit("run", str(SCRIPTS / "segfault.py"), "--warmup", "1", "--steps", "10", "--out-dir", str(tmp_path))
    assert proc.returncode == 3
    assert "crashed (SIGSEGV)" in proc.stdout and "Traceback" not in proc.stderr


def test_failure_after_the_window_with_full(tmp_path):
    out = tmp_path / "r.json"
    proc = perfaudit("run", str(SCRIPTS / "fail_after_window.py"), "--warmup", "1", "--steps", "2", "--full",
                     "--out-dir", str(tmp_path / "run"), "-f", f"json={out}")
    assert proc.returncode == 3
    outcome = json.loads(out.read_text())["run"]["outcome"]
    assert outcome["outcome"] == "window_complete" and outcome["after_window"]["exception"] == "ValueError"
    assert "raised ValueError: evaluation failed after training" in proc.stdout


def test_rule_dir_with_an_unknown_fact(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    text = (ROOT / "rules" / "MEM002.yaml").read_text()
    (rules / "X.yaml").write_text(text.replace("id: MEM002", "id: XTRA001").replace("mem.peak.reserved_pct", "mem.nope"))
    proc = perfaudit("rules", "--rules-dir", str(rules))
    assert proc.returncode == 2
    assert "X.yaml" in proc.stderr and "mem.nope" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_debug_shows_the_traceback():
    proc = perfaudit("--debug", "analyze", "nope.json.gz")
    assert proc.returncode == 2 and "Traceback" in proc.stderr


def test_unknown_format_is_a_usage_error():
    proc = perfaudit("analyze", "nope.json.gz", "--format", "pdf")
    assert proc.returncode == 2 and "unknown format 'pdf'" in proc.stderr


def test_no_process_survives_a_run_with_workers(sample_report):
    """(other tests run the same scripts beside it, in their own run folders)"""
    run_dir = sample_report("data_good.py")["run"]["run_dir"]
    assert not survivors("sample_scripts/data_good.py", run_dir)


def _bad_traces(tmp_path):
    import gzip as gz
    good = b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}'
    cases = {
        "empty.json": (b"", "empty"),
        "truncated.json.gz": (gz.compress(good * 50)[:40], "truncated or corrupt gzip"),
        "not.json": (b"<html>not a trace</html>", "not a JSON trace"),
        "no_events.json": (b'{"schemaVersion": 1, "deviceProperties": []}', "no `traceEvents`"),
        "zero_steps.json": (b'{"traceEvents": [{"name": "process_name", "ph": "M", "pid": 1}]}', "no profiler events"),
        "cut.json": (good[:-20], "not valid JSON or truncated"),
    }
    for name, (data, _) in cases.items():
        (tmp_path / name).write_bytes(data)
    return cases


def test_bad_trace_files_through_the_cli(tmp_path):
    for name, (_, message) in _bad_traces(tmp_path).items():
        proc = perfaudit("analyze", str(tmp_path / name))
        assert proc.returncode == 2, name
        assert message in proc.stderr and "Traceback" not in proc.stderr, (name, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, name


def test_bad_rule_files_through_the_cli(tmp_path):
    base = (ROOT / "rules" / "MEM002.yaml").read_text().replace("id: MEM002", "id: XTRA001")
    cases = {
        "syntax": ("id: X\ntitle: [unclosed\n", "YAML syntax error"),
        "unknown_key": (base + "colour: red\n", "colour"),
        "wrong_type": (base.replace("severity: warning", "severity: 3"), "severity"),
        "duplicate": (base.replace("id: XTRA001", "id: SYNC001"), "duplicate rule id SYNC001"),
    }
    for name, (text, message) in cases.items():
        rules = tmp_path / name
        rules.mkdir()
        (rules / "rule.yaml").write_text(text)
        proc = perfaudit("rules", "--rules-dir", str(rules))
        assert proc.returncode == 2, name
        assert message in proc.stderr and "rule.yaml" in proc.stderr and "Traceback" not in proc.stderr, name
