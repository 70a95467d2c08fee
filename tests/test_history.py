"""`perfaudit history`: each audited commit appends its step time and findings to a JSON Lines file in the
repository; the newest entry is judged against the recent ones (beyond their noise between runs) and the
gate fails on a slowdown over --fail-on-slowdown. The end-to-end test measures a tiny script at a good commit
until three runs were timed, then at a commit that adds a per-step host sync and host work (+60 % on a
6 ms step, far above both the 10 % limit and the noise); a run whose steps mostly waited for a CPU is
"busy": recorded, not judged, and the gate passes. The series tests check the change-point and noise
logic on recorded-looking histories."""
from __future__ import annotations

import json
import random
import subprocess

import pytest

from bisect_repo import make_history
from conftest import needs_program, perfaudit
from perfaudit.verify.history import BASES, check


def _history(repo, *extra):
    out = repo.parent / "judged.json"
    proc = perfaudit("history", "train.py", "--warmup", "2", "--steps", "8", "-o", str(out), *extra, cwd=repo,
                     timeout=300)
    return proc, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.timing
def test_history_records_each_commit_and_fails_the_gate_on_the_commit_that_slowed_the_step(tmp_path):
    needs_program("git", why="history reads the commit from git")
    repo = tmp_path / "repo"
    # a regression well beyond what a loaded machine spreads its steps by (8000 reads a step: about 1.5x)
    history = make_history(repo, commits=1, culprit=0, seed=3, reads=8000)
    subprocess.run(["git", "checkout", "-q", history["good"]], cwd=repo, check=True)
    # the good commit, until three of its runs were timed on a machine free enough (a run whose steps mostly
    # waited for a CPU is recorded as busy and never judged): a good commit never fails the gate
    timed = runs = 0
    while timed < 3 and runs < 8:
        proc, judged = _history(repo, "--fail-on-slowdown", "10%")
        runs += 1
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert judged["verdict"] in ("first", "too few", "steady", "faster", "busy"), proc.stdout
        timed += judged["verdict"] != "busy"
    lines = (repo / "perfaudit-history.jsonl").read_text().splitlines()
    assert len(lines) == runs and all(json.loads(line)["commit"] == history["good"] for line in lines)
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout == \
        "?? perfaudit-history.jsonl\n"
    busy = [json.loads(line) for line in lines if json.loads(line).get("busy")]
    # each entry carries the steps timed after the window without the profiler, the figure judged once three have it
    assert all("unprofiled_ms" in json.loads(line) and json.loads(line)["unprofiled_steps_ms"] is not None
               for line in lines), lines
    if timed < 3:  # a machine this busy for minutes (a loaded CI runner): each run recorded as busy, none judged
        assert len(busy) >= runs - timed, busy   # on the load, and the gate passed every time (above)
        return

    subprocess.run(["git", "checkout", "-q", history["culprit"]], cwd=repo, check=True)
    # --dry-run judges without appending (tried again while the machine is too busy to judge); a limit
    # above the slowdown passes the gate (the culprit is about 5x quiet; 14.6x was seen beside a loaded suite)
    for _ in range(3):
        proc, judged = _history(repo, "--dry-run", "--fail-on-slowdown", "100000")
        if judged["verdict"] != "busy":
            break
    # a busy machine can spread even its undisturbed runs by more than 2x: then history says the change is
    # within that noise (steady, the gate passes), which is the honest answer for three such runs
    noisy = judged["verdict"] == "steady" and judged["noise_pct"] > 100
    assert proc.returncode == 0 and not judged["fails"] and (judged["verdict"] in ("slower", "busy") or noisy), \
        proc.stdout
    assert len((repo / "perfaudit-history.jsonl").read_text().splitlines()) == runs
    for _ in range(3):
        proc, judged = _history(repo, "--fail-on-slowdown", "10%")
        if judged["verdict"] != "busy":
            break
    else:  # every run waited for a CPU: not judged and the gate passes, rather than a verdict on the load
        assert proc.returncode == 0 and "not judged" in proc.stdout
        return
    if judged["verdict"] == "steady" and judged["noise_pct"] > 100:  # the good runs were too spread to judge
        assert proc.returncode == 0 and "the noise allows" in proc.stdout
        return
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert judged["verdict"] == "slower" and judged["fails"] and judged["change_pct"] > max(10, judged["noise_pct"])
    assert judged["entry"]["commit"] == history["culprit"] and judged["compared"] == 3
    assert judged["basis"] in ("unprofiled_ms", "step_ms") and f"({BASES[judged['basis']]})" in proc.stdout
    assert any(f.startswith("SYNC001 train.py:") for f in judged["new_findings"]), judged["new_findings"]
    assert "gate: FAIL" in proc.stdout and "slower" in proc.stdout

def _entries(values, device="cpu", start=0):
    return [{"commit": f"{i:040x}", "subject": f"commit {i}", "script": "train.py", "device": device,
             "step_ms": v, "steps_ms": [v] * 8, "findings": []} for i, v in enumerate(values, start)]


def test_a_sustained_shift_is_a_change_point_at_its_first_commit_and_noise_is_not():
    rng = random.Random(7)
    before = [100 * (1 + rng.uniform(-0.08, 0.08)) for _ in range(12)]   # ±8 % between runs
    after = [130 * (1 + rng.uniform(-0.08, 0.08)) for _ in range(4)]
    # the first slow commit: slower than the recent runs beyond their noise, the gate fails
    judged = check(_entries(before), _entries(after[:1], start=12)[0], fail_on_slowdown_pct=10)
    assert judged.verdict == "slower" and judged.fails and 20 < judged.change_pct < 40
    # three commits later the slow runs are the current level (the gate passes) and the change point names
    # the commit that started it
    *earlier, latest = _entries(before + after)
    judged = check(earlier, latest, fail_on_slowdown_pct=10)
    assert judged.change_point is not None and judged.change_point.entry["commit"] == f"{12:040x}"
    assert judged.change_point.entries_after == 4 and 20 < judged.change_point.change_pct < 40
    assert judged.verdict == "steady" and not judged.fails and judged.baseline_ms > 115

    for seed in range(20):  # the same noise without a shift: never a change point, never a failed gate
        rng = random.Random(seed)
        *earlier, latest = _entries([100 * (1 + rng.uniform(-0.08, 0.08)) for _ in range(16)])
        judged = check(earlier, latest, fail_on_slowdown_pct=10)
        assert judged.change_point is None and not judged.fails, (seed, judged.change_pct, judged.noise_pct)


def test_one_slow_run_is_no_change_point_nor_noise_and_other_devices_are_not_compared():
    *earlier, latest = _entries([100, 101, 99, 100, 102, 98, 100, 100, 160])
    judged = check(earlier, latest)
    assert judged.verdict == "slower" and judged.change_point is None  # one run is not yet a new level
    # that run, now in the history (a busy machine slowed it), does not widen the noise for what follows
    *earlier, latest = _entries([100, 101, 99, 100, 102, 98, 100, 400, 101, 135])
    judged = check(earlier, latest, fail_on_slowdown_pct=10)
    assert judged.verdict == "slower" and judged.fails and "1 far-off run(s) left out" in judged.noise_from
    judged = check(_entries([50, 51, 49, 50], device="NVIDIA H100"), _entries([100])[0])
    assert judged.verdict == "first" and not judged.compared


def test_the_step_without_the_profiler_is_judged_once_recent_entries_have_it():
    """The profiler's cost per Python call and op made a step of host work 100 ms as recorded where it takes
    20 ms: a commit that adds 10 ms of it moves the recorded step by 3 % (steady) and the step timed without the
    profiler by 50 %. Once three recent entries have that step it is the one judged, and the older entries
    without it are left out of the comparison; before that, the recorded step is, as in a history from before."""
    rng = random.Random(3)
    old = _entries([100 * (1 + rng.uniform(-0.02, 0.02)) for _ in range(4)])
    timed = _entries([100 * (1 + rng.uniform(-0.02, 0.02)) for _ in range(4)], start=4)
    for e in timed:
        e["unprofiled_ms"] = 20 * (1 + rng.uniform(-0.03, 0.03))
    latest = _entries([103], start=8)[0]
    latest["unprofiled_ms"] = 30.0
    judged = check(old + timed, latest, fail_on_slowdown_pct=10)
    assert judged.basis == "unprofiled_ms" and len(judged.compared) == 4
    assert judged.verdict == "slower" and judged.fails and 45 < judged.change_pct < 55
    judged = check(old + timed[:2], latest, fail_on_slowdown_pct=10)  # two with it: the recorded step still
    assert judged.basis == "step_ms" and len(judged.compared) == 6 and judged.verdict == "steady" and not judged.fails


def test_findings_are_matched_by_rule_file_and_code_so_a_moved_line_is_not_new():
    a, b = _entries([100, 100])
    a["findings"] = [{"rule": "SYNC001", "where": "train.py:18", "code": "running += loss.item()"}]
    b["findings"] = [{"rule": "SYNC001", "where": "train.py:21", "code": "running += loss.item()"},
                     {"rule": "DATA001", "where": "train.py:9", "code": "loader = DataLoader(ds)"}]
    judged = check([a], b)
    assert judged.new_findings == ["DATA001 train.py:9"] and judged.gone_findings == []


def test_an_unreadable_history_line_is_skipped_and_named(tmp_path, run_dir):
    from conftest import SAMPLES, _run_json
    _run_json("run", str(SAMPLES / "sync_bad.py"), run_dir)  # the shared run of the sample script
    folder = f"{run_dir}/sync_bad"
    file = tmp_path / "h.jsonl"
    file.write_text('{"truncated": \n' + json.dumps(_entries([1.0])[0]) + "\n")
    proc = perfaudit("history", folder, "--file", str(file), "-o", str(tmp_path / "j.json"))
    judged = json.loads((tmp_path / "j.json").read_text())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any(n.startswith(f"{file}:1 is not a history entry: not valid JSON") and n.endswith(": skipped")
               for n in judged["notes"]), judged["notes"]
    assert judged["entry"]["run_dir"] == folder
    assert any(f["rule"] == "SYNC001" for f in judged["entry"]["findings"])
    assert len(file.read_text().splitlines()) == 3


def test_a_far_off_run_among_three_stays_in_the_spread_rather_than_leave_two():
    """Three earlier runs, one far off: leaving it out would bound the noise from two runs (Student's t with one
    degree of freedom: 64 deviations; here ±124 %, and a commit 2.1x slower is 'steady'); kept, the bound is
    ±99 % and the commit is slower."""
    from perfaudit.verify.history import check
    judged = check(_entries([3.05, 3.12, 3.55]), _entries([6.6], start=9)[0], fail_on_slowdown_pct=10)
    assert "left out" not in judged.noise_from and judged.noise_pct < 100
    assert judged.verdict == "slower" and judged.fails


def test_sigterm_during_the_run_prints_what_it_measured_and_records_nothing(tmp_path):
    """A stopped measurement is shown, not kept as the commit's level: the history file is untouched and the
    command exits 143 (the next run of the CI job records the commit)."""
    import signal
    import sys
    import time
    (tmp_path / "slow.py").write_text(
        "import time\nimport torch\nfrom torch import nn\n\n"
        "model = nn.Linear(64, 64)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(100_000):\n    optimizer.zero_grad()\n    model(torch.randn(32, 64)).sum().backward()\n"
        "    optimizer.step()\n    time.sleep(0.02)\n")
    history = tmp_path / "perfaudit-history.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "perfaudit", "history", "slow.py", "--warmup", "1", "--steps",
                             "10000", "--file", str(history)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    runs = tmp_path / ".perfaudit" / "runs"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:  # measuring: its progress file says steps
        progress = list(runs.glob("*/progress.jsonl"))
        if progress and '"step"' in progress[0].read_text(errors="replace"):
            break
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stdout + stderr
    assert "measured steps" in stdout and "not recorded (stopped by SIGTERM)" in stdout
    assert not history.exists()
