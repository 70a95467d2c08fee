"""Nothing lost, nothing overwritten, nothing left running, no silent pass: everyday situations, through
the real CLI with real processes and signals."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, SAMPLES, TRACES, needs_shared, perfaudit

SCRIPTS = ROOT / "tests" / "scripts"


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path):
    yield
    if _alive(str(tmp_path)):  # a failed test must not leave a run behind (only this test's: tests run in parallel)
        subprocess.run(["pkill", "-KILL", "-f", str(tmp_path)])


def _hang(tmp_path) -> Path:
    """This test's own copy of hang.py: processes are then found by a path no other test uses."""
    copy = tmp_path / "hang.py"
    shutil.copy(SCRIPTS / "hang.py", copy)
    return copy


def _start(tmp_path, script, *extra):
    out = tmp_path / "report.json"
    proc = subprocess.Popen([sys.executable, "-m", "perfaudit", "run", str(script), "--warmup", "1", "--steps", "5",
                             "--out-dir", str(tmp_path / "run"), "-f", f"json={out}", *extra],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return proc, out


def _wait_for_steps(tmp_path, timeout=120):
    progress = tmp_path / "run" / "progress.jsonl"
    deadline = time.time() + timeout
    while time.time() < deadline and not (progress.exists() and '"step"' in progress.read_text()):
        time.sleep(0.2)
    time.sleep(1.0)


def _alive(pattern: str) -> list[str]:
    """Command lines of the running (not zombie) processes that contain `pattern`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if pattern in cmdline and state != "Z":
            found.append(cmdline)
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_the_script_and_keep_the_report(tmp_path, sig):
    proc, out = _start(tmp_path, _hang(tmp_path))
    _wait_for_steps(tmp_path)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, stderr
    report = json.loads(out.read_text())
    assert report["run"]["outcome"]["outcome"] == "interrupted"
    assert report["run"]["outcome"]["by"] == signal.Signals(sig).name
    assert report["run"]["steps"] >= 1 and (tmp_path / "run" / "trace.json.gz").exists()
    assert "stopped by" in stdout and "Traceback" not in stderr
    assert not _alive(str(tmp_path / "hang.py"))
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        ".perfaudit-run", "progress.jsonl", "report.html", "report.json", "result.json", "script.log", "trace.json.gz"]


def test_a_second_ctrl_c_still_reports_and_leaves_no_temporary_files(tmp_path):
    proc, out = _start(tmp_path, _hang(tmp_path))
    _wait_for_steps(tmp_path)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # impatient: do not wait for the grace period
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert out.exists() and json.loads(out.read_text())["run"]["outcome"]["outcome"] == "interrupted"
    assert not [p.name for p in (tmp_path / "run").iterdir() if p.name.endswith((".tmp", ".json"))
                and p.name not in ("result.json", "report.json")]
    assert not _alive(str(tmp_path / "hang.py"))


def test_a_child_killed_while_gzipping_its_trace_leaves_the_trace_and_no_temporary_file(tmp_path):
    """Killed after Kineto's trace was written and while its gzipped copy was (trace.json.gz.tmp), in a window of
    two profiler sessions (trace.json.part0): the complete plain trace is kept, gzipped, and nothing temporary
    stays (a fresh-clone CI run's second Ctrl-C left trace.json.gz.tmp)."""
    from perfaudit.collect.run.leftovers import salvage_trace
    (tmp_path / "trace.json").write_text('{"traceEvents": []}')
    for name in ("trace.json.gz.tmp", "trace.json.part0", "trace.json.part0.tmp", "result.json.tmp"):
        (tmp_path / name).write_bytes(b"half")
    salvage_trace(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json.gz"]


def test_a_killed_perfaudit_leaves_no_script_running(tmp_path):
    script = _hang(tmp_path)
    proc, _ = _start(tmp_path, script)
    _wait_for_steps(tmp_path)
    assert _alive(f"perfaudit.child {script}")
    proc.kill()  # SIGKILL: perfaudit gets no chance to clean up
    proc.communicate(timeout=30)
    deadline = time.time() + 30
    while time.time() < deadline and _alive(f"perfaudit.child {script}"):
        time.sleep(0.5)
    assert not _alive(f"perfaudit.child {script}")
    result = json.loads((tmp_path / "run" / "result.json").read_text())  # it wrote what it had
    assert result["outcome"] == "interrupted" and (tmp_path / "run" / "trace.json.gz").exists()


def test_out_dir_never_touches_the_users_files(tmp_path):
    work = tmp_path / "project"
    work.mkdir()
    script = work / "train.py"
    script.write_text((SAMPLES / "sync_bad.py").read_text().replace(
        "import torch\n", "import json\nimport torch\nassert json.load(open('config.json')) == {'lr': 0.1}\n", 1))
    mine = {"config.json": '{"lr": 0.1}', "result.json": "my results", "script.log": "my log"}
    for name, text in mine.items():
        (work / name).write_text(text)
    proc = perfaudit("run", "train.py", "--warmup", "1", "--steps", "2", "--out-dir", ".", cwd=work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert {name: (work / name).read_text() for name in mine} == mine
    runs = [p for p in work.iterdir() if p.name.startswith("perfaudit-run-")]
    assert len(runs) == 1 and (runs[0] / "trace.json.gz").exists()
    assert f"run folder: {runs[0].relative_to(work)}" in proc.stdout.replace("\n", "")  # as ruff prints paths


def test_default_run_folders_are_pruned_and_ignored_by_git(tmp_path):
    shutil.copy(SAMPLES / "sync_good.py", tmp_path / "train.py")
    (tmp_path / "perfaudit.toml").write_text("keep-runs = 2\n")
    runs = tmp_path / ".perfaudit" / "runs"
    earlier = [runs / "20250101-000000-000000", runs / "20250102-000000-000000"]  # two finished runs
    for folder in earlier:
        folder.mkdir(parents=True)
        (folder / ".perfaudit-run").write_text("perfaudit run folder\n")
    assert perfaudit("run", "train.py", "--warmup", "0", "--steps", "1", cwd=tmp_path).returncode == 0
    kept = sorted(p.name for p in runs.iterdir())
    assert len(kept) == 2 and earlier[0].name not in kept and earlier[1].name in kept, kept
    assert (tmp_path / ".perfaudit" / ".gitignore").read_text().strip().endswith("*")


def test_script_log_keeps_head_and_tail(tmp_path):
    script = tmp_path / "chatty.py"
    script.write_text("import sys\nfor i in range(60_000):\n    print(f'line {i:07d} ' + 'x' * 60)\n")  # 4.3 MB
    proc = perfaudit("run", str(script), "--out-dir", str(tmp_path / "run"), "--allow-no-training")
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "run" / "script.log").read_text()
    assert len(log) < 2.2 * (1 << 20)
    assert "line 0000000" in log[:2000] and log.rstrip().endswith("line 0059999 " + "x" * 60)
    assert "bytes of output left out here" in log


def test_no_training_is_not_a_pass(tmp_path):
    script = SCRIPTS / "setup_only.py"
    proc = perfaudit("run", str(script), "--out-dir", str(tmp_path / "a"), "--fail-on", "info", "--", "--dry-run")
    assert proc.returncode == 1
    text = proc.stdout.replace("\n", " ")
    assert "nothing was measured: an optimizer was built but never stepped" in text
    assert "no training step was measured" in text
    proc = perfaudit("run", str(script), "--out-dir", str(tmp_path / "b"), "--fail-on", "info",
                     "--allow-no-training", "--", "--dry-run")
    assert proc.returncode == 0, proc.stdout


FUNCTIONAL_SGD = """\
import torch
import torch.nn.functional as F


class FunctionalNet:
    \"\"\"Weights as a list, updated by hand: a meta-learning inner loop's shape.\"\"\"
    def __init__(self, device):
        self.weights = [(torch.randn(32, 64) * 0.1).to(device).requires_grad_(),
                        (torch.randn(64, 4) * 0.1).to(device).requires_grad_()]

    def __call__(self, x):
        return torch.relu(x @ self.weights[0]) @ self.weights[1]


def sgd_step(net, x, y, lr=0.1):
    loss = F.cross_entropy(net(x), y)
    grads = torch.autograd.grad(loss, net.weights)
    with torch.no_grad():
        for w, g in zip(net.weights, grads):
            w -= lr * g
    return loss


device = "cuda" if torch.cuda.is_available() else "cpu"
net, data, labels = FunctionalNet(device), torch.randn(2048, 32), torch.randint(0, 4, (2048,))
for step in range(200):
    i = torch.randint(0, 2048, (64,))
    loss = sgd_step(net, data[i].to(device), labels[i].to(device))
    if loss.item() < 1e-3:
        break
"""


@pytest.mark.parametrize("device", ["cpu", "emulate-cuda"])
def test_a_loop_that_trains_with_autograd_grad_is_measured(tmp_path, device):
    """No optimizer and no backward(): `torch.autograd.grad` and a hand-written update. The run said the script
    never started training; each outermost autograd.grad is the step's backward pass now."""
    script = tmp_path / "functional_sgd.py"
    script.write_text(FUNCTIONAL_SGD)
    out = tmp_path / "r.json"
    proc = perfaudit("run", str(script), "--device", device, "--warmup", "1", "--steps", "3", "--out-dir",
                     str(tmp_path / "run"), "-f", f"json={out}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["run"]["steps"] == 3 and report["run"]["outcome"]["step_source"] == "backward", report["notes"]
    sync = next(f for f in report["findings"] if f["rule"] == "SYNC001")
    assert [loc["line"] for loc in sync["locations"]] == [29]  # loss.item() every step


def test_spawned_training_is_recognised_at_once(tmp_path):
    """Recognised when spawn is called, not found out by the timeout (the outcome would say so)."""
    proc = perfaudit("run", str(SCRIPTS / "spawn_ddp.py"), "--out-dir", str(tmp_path), "--timeout", "240")
    assert proc.returncode == 0
    assert "timeout" not in proc.stdout
    assert "torch.multiprocessing.spawn" in proc.stdout and "torchrun" in proc.stdout.replace("\n", " ")
    assert not _alive(str(SCRIPTS / "spawn_ddp.py"))


def test_a_spawn_of_one_process_runs_its_function_here_and_is_measured(tmp_path):
    """The DDP tutorials spawn one process per GPU (`mp.spawn(main_worker, nprocs=torch.cuda.device_count())`):
    on one GPU, or the emulated device, that is one process, and its function runs in the audited process as rank
    0, so the report measures the training instead of saying nothing was; `--device cpu` counts no GPU and the
    script spawns nothing: that run still says the training was not seen."""
    script = ROOT / "tests" / "realistic" / "ddp_spawn_tutorial.py"
    out = tmp_path / "r.json"
    proc = perfaudit("run", str(script), "--out-dir", str(tmp_path / "a"), "--warmup", "1", "--steps", "3",
                     "-f", f"json={out}", "--timeout", "240")
    assert proc.returncode == 0 and out.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["run"]["outcome"]["outcome"] == "window_complete" and report["run"]["steps"] == 3, report["notes"]
    assert any("torch.multiprocessing.spawn at ddp_spawn_tutorial.py:41 starts one process" in n for n in report["notes"])
    at = {(f["rule"], loc["line"]) for f in report["findings"] for loc in f["locations"]}
    assert {("DDP003", 23), ("COPY001", 30)} <= at, at
    # DDP003's cost: the reducer's copies of the buckets back into the four gradients, timed, and projected
    ddp = next(f for f in report["findings"] if f["rule"] == "DDP003")
    assert "4 copies back a step" in ddp["message"] and ddp["cost"]["ms_per_step"] > 0, ddp
    assert ddp["projected_ms_per_step"] is not None, ddp
    plain = perfaudit("run", str(script), "--device", "cpu", "--out-dir", str(tmp_path / "b"), "--timeout", "240")
    assert "torch.multiprocessing.spawn" in plain.stdout and not _alive(str(script))


def test_inference_only_script_is_audited_as_such(tmp_path):
    out = tmp_path / "r.json"
    proc = perfaudit("run", str(SCRIPTS / "inference.py"), "--out-dir", str(tmp_path / "run"), "-f", f"json={out}",
                     timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["run"]["outcome"]["step_source"] == "inference" and report["run"]["steps"] == 5
    assert any("inference or evaluation" in n for n in report["notes"])
    measured = [f for f in report["findings"] if f["origin"] != "projected"]  # not what the GPU projection adds
    assert [(f["rule"], f["location"]["line"]) for f in measured] == [("SYNC001", 9)]


def test_window_is_the_finetuning_loop_after_a_short_pretrain(realistic_reports):
    from perfaudit.trace import load_trace
    made = realistic_reports["finetune.py"]  # `perfaudit run tests/scripts/finetune.py`, shared with test_realistic
    assert made["rc"] == 0
    report = made["run"]
    assert report["run"]["steps"] == 5
    assert [(f["rule"], f["location"]["line"]) for f in report["findings"]] == [("SYNC001", 22)]
    trace = load_trace(str(Path(made["run_dir"]) / "trace.json.gz"))
    for step in trace.measured_steps:  # every measured step is a fine-tuning step (SGD), none Adam's
        names = {e.name for e in trace.host if step.ts <= e.ts <= step.end and e.name.startswith("Optimizer.step#")}
        assert names == {"Optimizer.step#SGD.step"}


def test_evaluation_and_preparation_before_training_stay_out_of_the_window(realistic_reports):
    from perfaudit.trace import load_trace
    made = realistic_reports["validate_first.py"]
    assert made["rc"] == 0
    report = made["run"]
    assert ("SYNC001", 34) in [(f["rule"], f["location"]["line"]) for f in report["findings"]]
    trace = load_trace(str(Path(made["run_dir"]) / "trace.json.gz"))
    assert not any(e.name.startswith("enumerate(DataLoader)") and "no_grad" in e.name for e in trace.host)
    assert all(s.dur < 0.5e6 for s in trace.steps)  # the 1 s preparation is not in any step
    assert sum(e.name == "aten::randn" for e in trace.host) < 10  # nor in the trace (it draws ~10^5 times)


def test_frames_already_running_and_comprehensions_are_located(tmp_path):
    """The loop's function started before recording (Kineto names it by its current line) and the
    copies are made in a list comprehension (a frame of its own): both still give the exact lines."""
    script = tmp_path / "train.py"
    script.write_text('''import torch
from torch.utils.data import DataLoader, TensorDataset


def train():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(64, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(4096, 64), torch.randn(4096, 1)), batch_size=32)
    total = 0.0
    for epoch in range(100):
        for batch in loader:
            x, y = [t.to(device) for t in batch]
            loss = (model(x) - y).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
    print(total)


train()
''')
    out = tmp_path / "r.json"
    proc = perfaudit("run", str(script), "--out-dir", str(tmp_path / "run"), "-f", f"json={out}")
    assert proc.returncode == 0, proc.stderr
    found = {f["rule"]: [(loc["line"], loc["exact"]) for loc in f["locations"]] for f in json.loads(out.read_text())["findings"]}
    assert found["SYNC001"] == [(18, True)]
    assert found["COPY001"] == [(13, True)]


def test_non_ascii_script_path_is_matched(tmp_path):
    folder = tmp_path / "проект"
    folder.mkdir()
    script = folder / "тренировка.py"
    shutil.copy(SAMPLES / "sync_bad.py", script)
    out = tmp_path / "r.json"
    proc = perfaudit("run", str(script), "--warmup", "1", "--steps", "2", "--out-dir", str(tmp_path / "run"),
                     "-f", f"json={out}")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    measured = [f for f in report["findings"] if f["origin"] != "projected"]  # not what the GPU projection adds
    assert [(f["rule"], f["location"]["path"], f["location"]["line"]) for f in measured] == [
        ("SYNC001", str(script), 18)]


def test_unknown_rule_ids_are_errors_naming_the_nearest(tmp_path):
    proc = perfaudit("lint", str(SAMPLES), "--select", "SYNC01")
    assert proc.returncode == 2 and "SYNC01" in proc.stderr and "SYNC001" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    (tmp_path / "perfaudit.toml").write_text("ignore = ['GRAD01']\n")
    proc = perfaudit("lint", str(SAMPLES), cwd=tmp_path)
    assert proc.returncode == 2 and "GRAD01" in proc.stderr and "perfaudit.toml" in proc.stderr


def test_bad_outputs_fail_before_the_script_runs(tmp_path):
    run = tmp_path / "run"
    proc = perfaudit("run", str(SCRIPTS / "hang.py"), "--out-dir", str(run), "-o", str(tmp_path / "missing" / "r.json"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    (tmp_path / "base.json").write_text("{not json")
    proc = perfaudit("run", str(SCRIPTS / "hang.py"), "--out-dir", str(run), "--baseline", str(tmp_path / "base.json"))
    assert proc.returncode == 2 and "not a perfaudit baseline" in proc.stderr
    assert not run.exists()  # hang.py never started


def test_console_report_survives_an_unwritable_file(tmp_path):
    out = tmp_path / "r.json"
    out.mkdir()  # a folder where the file should go: found before running
    proc = perfaudit("lint", str(SAMPLES / "sync_bad.py"), "-o", str(out))
    assert proc.returncode == 2 and "is a directory" in proc.stderr


def test_analyze_folder_skips_what_is_not_a_trace(run_dir, sample_report, tmp_path):
    sample_report("sync_bad.py")
    folder = tmp_path / "run"
    shutil.copytree(f"{run_dir}/sync_bad", folder)
    (folder / "notes.json").write_text('{"a": 1}')
    (folder / "broken.json").write_text('{"traceEvents": [')
    proc = perfaudit("analyze", str(folder), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [f["rule"] for f in report["findings"] if f["origin"] != "projected"] == ["SYNC001"]
    notes = " ".join(report["notes"])
    assert "notes.json: not a profiler trace" in notes and "broken.json" in notes
    assert "result.json" not in notes  # perfaudit's own record in its run folder: skipped quietly
    proc = perfaudit("analyze", str(folder / "broken.json"))
    assert proc.returncode == 2 and "broken.json" in proc.stderr


def test_analyze_names_a_symlink_loop(tmp_path):
    loop = tmp_path / "loop.json"
    os.symlink(loop, loop)
    proc = perfaudit("analyze", str(loop))
    assert proc.returncode == 2 and "loop.json" in proc.stderr and "not found" not in proc.stderr


def test_lint_goes_on_past_a_file_it_cannot_parse(tmp_path):
    shutil.copy(SAMPLES / "sync_bad.py", tmp_path / "train.py")
    (tmp_path / "legacy.py").write_text("print 'python 2'\n")
    proc = perfaudit("lint", str(tmp_path), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [f["rule"] for f in report["findings"]] == ["SYNC001"]
    assert any("legacy.py" in n for n in report["notes"])


@pytest.mark.parametrize("make,message", [
    (lambda p: p.mkdir(), "no Python files"),
    (lambda p: p.write_text("{}"), "notebook"),
])
def test_lint_and_run_explain_empty_folders_and_notebooks(tmp_path, make, message):
    target = tmp_path / ("empty" if "files" in message else "train.ipynb")
    make(target)
    proc = perfaudit("lint", str(target))
    if message == "notebook":  # a file that is no notebook is skipped by lint and named, as a .py that does not parse
        assert proc.returncode == 0 and "is not a notebook" in " ".join(proc.stdout.split())
        proc = perfaudit("run", str(target))
        assert proc.returncode == 2 and "is not a notebook" in proc.stderr and "Traceback" not in proc.stderr
    else:
        assert proc.returncode == 2 and message in proc.stderr


def test_help_debug_pipes_and_one_line_usage_errors(tmp_path):
    for command in ("run", "analyze", "lint", "explain", "rules"):
        assert perfaudit(command, "-h").returncode == 0
    proc = perfaudit("lint", str(SAMPLES / "sync_bad.py"), "--bogus")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    proc = perfaudit("analyze", "nope.json", "--debug")
    assert proc.returncode == 2 and "Traceback" in proc.stderr  # --debug after the command
    head = f"{sys.executable} -c 'import sys; print(sys.stdin.readline(), end=\"\")'"  # a reader that leaves
    piped = subprocess.run(f"{sys.executable} -m perfaudit lint {SAMPLES} | {head}", shell=True, cwd=ROOT,
                           capture_output=True, text=True, executable="/bin/bash",
                           env={**os.environ, "PIPESTATUS_PROBE": "1"})
    assert piped.returncode == 0
    status = subprocess.run(f"set -o pipefail; {sys.executable} -m perfaudit rules | {head}", shell=True,
                            cwd=ROOT, capture_output=True, text=True, executable="/bin/bash")
    assert status.returncode == 0, status.stderr
    # the console report to a reader that has already left (rich alone would exit 1): the gate's code stays
    trace = needs_shared(TRACES / "hta" / "amd_mi250_minitoy_train.json.gz")
    for gate, code in (("never", 0), ("warning", 1)):
        gone = subprocess.run(f"set -o pipefail; {sys.executable} -m perfaudit analyze {trace} --fail-on {gate} | true",
                              shell=True, cwd=ROOT, capture_output=True, text=True, executable="/bin/bash")
        assert gone.returncode == code and gone.stderr == "", gone.stderr


def test_baseline_works_from_any_working_directory(tmp_path):
    shutil.copy(SAMPLES / "sync_bad.py", tmp_path / "train.py")
    sub = tmp_path / "sub"
    sub.mkdir()
    assert perfaudit("lint", "train.py", "--baseline-write", "base.json", cwd=tmp_path).returncode == 0
    proc = perfaudit("lint", "../train.py", "--baseline", "../base.json", "--fail-on", "warning", cwd=sub)
    assert proc.returncode == 0, proc.stdout


def test_a_traceback_with_a_page_long_message_keeps_the_frames_that_say_where():
    """torch's dispatcher errors list every backend over pages; the traceback kept was the last 4,000 characters,
    all message, so where it was raised (the emulated device's code or the script's) was lost."""
    from perfaudit.collect.userframes import traceback_text

    def deep(n):
        if n == 0:
            raise NotImplementedError("Could not run 'aten::empty' with arguments from the 'CUDA' backend. "
                                      + "Backend: registered at file.cpp:1 [kernel]\n" * 400)
        deep(n - 1)
    try:
        deep(3)
    except NotImplementedError as exc:
        text = traceback_text(exc)
    assert len(text) <= 4000
    assert text.startswith("Traceback (most recent call last):") and text.count("in deep") == 4
    assert "NotImplementedError: Could not run 'aten::empty'" in text and text.endswith(" …\n")


def test_training_in_processes_the_script_starts_is_recognised_and_stopped(tmp_path):
    """pytorch/examples' Hogwild: `mp.Process(target=train)` per rank, then `join()`. The report said the script
    never started training, after waiting for the processes to finish theirs. Now the run ends when the script
    joins them, stopping them, and says where they were started; a process that only prepares data is waited
    for as before, and training in the script's own process is measured."""
    script = SCRIPTS / "hogwild.py"
    report = tmp_path / "a.json"
    proc = perfaudit("run", str(script), "--out-dir", str(tmp_path / "a"), "--timeout", "240", "-f", "console",
                     "-f", f"json={report}")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert json.loads(report.read_text())["run"]["outcome"]["outcome"] == "spawned"
    assert "Process(target=train) at hogwild.py:49" in " ".join(proc.stdout.split()), proc.stdout
    assert not _alive(str(script))
    here = tmp_path / "b.json"
    perfaudit("run", str(script), "--out-dir", str(tmp_path / "b"), "-f", f"json={here}", "--steps", "2",
              "--", "--train-here")
    assert json.loads(here.read_text())["run"]["steps"] >= 1


def test_a_dataloader_workers_error_is_told_by_its_own_last_line():
    from perfaudit.collect.userframes import first_line
    worker = RuntimeError("Caught ValueError in DataLoader worker process 1.\nOriginal Traceback (most recent call "
                          "last):\n  File \"data.py\", line 9, in __getitem__\nValueError: image 17 is truncated\n")
    assert first_line(worker) == "Caught ValueError in DataLoader worker process 1: ValueError: image 17 is truncated"
    assert first_line(ValueError("shapes differ\nmore")) == "shapes differ" and first_line(ValueError()) == ""
    assert len(first_line(RuntimeError("x" * 900))) == 500


def test_an_evaluation_in_the_first_steps_callback_does_not_size_the_window(tmp_path):
    """minGPT's Trainer evaluates in its batch-end callback at iteration 0 (`iter_num % 500 == 0`), with a
    DataLoader of its own, whose first batch is a step boundary: the step perfaudit sized to fit the trace budget
    was most of the evaluation, so the window shrank to one step, recorded without stacks (no file:line). A step
    in which the model goes back to training mode held an evaluation's end: it is sized again, as a step that
    switched to eval mode is."""
    script = tmp_path / "adder_like.py"
    script.write_text('''import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, data):
        self.model, self.data, self.callbacks = model, data, []
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def run(self, max_iters):
        loader = DataLoader(self.data, batch_size=32, shuffle=True)
        it = iter(loader)
        for self.iter_num in range(max_iters):
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(loader)
                x, y = next(it)
            loss = nn.functional.cross_entropy(self.model(x), y)
            self.model.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            for callback in self.callbacks:
                callback(self)


def evaluate(model, data):
    correct = 0
    for x, y in DataLoader(data, batch_size=1):  # greedy decoding, one sample at a time
        correct += int(model(x).argmax(-1).item() == y.item())
    return correct


def on_batch_end(trainer):
    if trainer.iter_num % 500 == 0:
        trainer.model.eval()
        with torch.no_grad():
            print("score", evaluate(trainer.model, test_set))
        trainer.model.train()


model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
train_set = TensorDataset(torch.randn(1024, 16), torch.randint(0, 4, (1024,)))
test_set = TensorDataset(torch.randn(1500, 16), torch.randint(0, 4, (1500,)))
trainer = Trainer(model, train_set)
trainer.callbacks.append(on_batch_end)
trainer.run(300)
''')
    report_path = tmp_path / "report.json"
    proc = perfaudit("run", str(script), "--max-trace-mb", "12", "--out-dir", str(tmp_path / "run"), "-f",
                     f"json={report_path}", cwd=tmp_path)
    assert report_path.exists(), proc.stderr[-2000:]
    report = json.loads(report_path.read_text())
    window = report["run"]["outcome"]["window"]
    assert report["run"]["steps"] == 5 and "stacks" not in window["trimmed"], window
    assert all(f["locations"] for f in report["findings"] if f["rule"] == "DATA001"), report["findings"]
