"""The integrations, as users run them: a Lightning script with perfaudit's callback (`python train.py`),
a Hugging Face Trainer script with its callback, and a notebook's cells through IPython with
`%load_ext perfaudit` and `%%perfaudit`. Each gives the findings `perfaudit run` gives on the same code,
at the same lines (the cell's lines for the magic), on CPU with tiny models built from configs."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, perfaudit

HERE = ROOT / "tests" / "integrations"
# rules whose verdict depends on what the code does, not on how fast this machine ran it
DETERMINISTIC = {"SYNC001", "BN001", "OPT001", "OPT002", "DEBUG001", "GRAD001", "CUDNN001"}


def _python(script: Path, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def _callback_report(folder: Path) -> dict:
    runs = sorted((folder / ".perfaudit" / "runs").iterdir())
    assert len(runs) == 1, runs
    return json.loads((runs[0] / "report.json").read_text())


def _placed(report: dict, label: str | None = None) -> set[tuple]:
    """(rule, file, line) of every place of every finding of a deterministic rule."""
    out = set()
    for f in report["findings"]:
        if f["rule"] in DETERMINISTIC:
            for loc in f.get("locations") or [f["location"]]:
                out.add((f["rule"], Path(loc["path"]).name if label is None else loc["path"], loc["line"]))
    return out


def _run(folder: Path, script: Path, *args: str) -> dict:
    out = folder / "run.json"
    proc = perfaudit("run", "--device", "cpu", "--out-dir", str(folder / "run"), "-f", f"json={out}",
                     str(script), *args, cwd=folder)
    assert proc.returncode == 0 and out.exists(), proc.stdout + proc.stderr
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def lightning_runs(tmp_path_factory):
    pytest.importorskip("lightning", reason="Lightning is not installed (pip install -e '.[test]')")
    folder = tmp_path_factory.mktemp("lightning")
    script = HERE / "lightning_cnn.py"
    proc = _python(script, cwd=folder)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return folder, proc, _callback_report(folder), _run(folder, script)


def test_the_lightning_callback_gives_perfaudit_runs_findings_at_the_same_lines(lightning_runs):
    folder, proc, report, run = lightning_runs
    placed = _placed(report)
    assert {("SYNC001", "lightning_cnn.py", 48), ("BN001", "lightning_cnn.py", 36), ("BN001", "lightning_cnn.py", 37),
            ("OPT001", "lightning_cnn.py", 58)} <= placed, placed
    assert placed == _placed(run)
    assert "finished after 32 steps" in proc.stdout  # the training went on to its end after the window
    assert "stands aside" in (folder / "run" / "script.log").read_text()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU is present: nothing is emulated")
def test_lightning_on_the_emulated_device_reports_the_branch_its_accelerator_chose(tmp_path):
    """Offered an emulated CUDA device (the default without a GPU), Lightning with `accelerator="cpu"`
    trains on the CPU: a CPU report, naming the script's `--accelerator` option; with `--accelerator gpu`
    Lightning's CUDA accelerator runs on the emulated device, and the CPU run's findings all stand."""
    pytest.importorskip("lightning", reason="Lightning is not installed (pip install -e '.[test]')")
    script = HERE / "lightning_cnn.py"
    reports = {}
    for accelerator in ("cpu", "gpu"):
        out = tmp_path / f"{accelerator}.json"
        proc = perfaudit("run", "--out-dir", str(tmp_path / accelerator), "-f", f"json={out}", str(script), "--",
                         "--accelerator", accelerator, cwd=tmp_path)
        assert proc.returncode == 0 and out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
        reports[accelerator] = json.loads(out.read_text())
    cpu, gpu = reports["cpu"], reports["gpu"]
    assert cpu["run"]["device"] == "cpu, CUDA path offered but not taken"
    assert any("-- --accelerator gpu" in n and "lightning_cnn.py:65" in n for n in cpu["notes"]), cpu["notes"]
    assert gpu["run"]["device"] == "cpu, CUDA path emulated" and gpu["run"]["outcome"]["outcome"] == "window_complete"
    assert _placed(cpu) <= _placed(gpu), (_placed(cpu), _placed(gpu))
    # cuDNN's flag is the Trainer's option under Lightning: at the line that builds it, said as that option
    cudnn = next(f for f in gpu["findings"] if f["rule"] == "CUDNN001")
    trainer = next(n for n, line in enumerate(script.read_text().splitlines(), 1) if "L.Trainer(" in line)
    assert cudnn["location"]["line"] == trainer and "`L.Trainer(..., benchmark=True)`" in cudnn["fix"], cudnn


def test_a_lightning_gan_with_manual_optimization_measures_whole_training_steps(tmp_path):
    """Lightning hands a torch optimizer a closure even under manual optimization, one that runs nothing: the run
    took each of the two optimizer steps for a closure step, and a step was half a training step, said to run its
    forward and backward inside optimizer.step(closure). A closure step is one whose closure runs a backward."""
    pytest.importorskip("lightning", reason="Lightning is not installed (pip install -e '.[test]')")
    out = tmp_path / "r.json"
    proc = perfaudit("run", str(HERE / "lightning_manual_gan.py"), "--device", "cpu", "--warmup", "2", "--steps", "3",
                     "--out-dir", str(tmp_path / "run"), "-f", f"json={out}", cwd=tmp_path)
    assert proc.returncode == 0 and out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    window = report["run"]["outcome"]["window"]
    assert window["step_source"] == "optimizer", window
    built = next(n for n, line in enumerate((HERE / "lightning_manual_gan.py").read_text().splitlines(), 1)
                 if "torch.optim.Adam" in line)
    [(label, count)] = window["optimizer_steps"].items()  # D's and G's, built on one line
    # two a step (D and G), in every step the window recorded (more than measured on a busy machine)
    assert label == f"Adam (line {built})" and count % 2 == 0 and count >= 2 * report["run"]["steps"], window
    note = next(n for n in report["notes"] if n.startswith("Lightning"))
    assert "one step of its optimizers" in note and "closure" not in note, note


def test_the_lightning_callback_counts_steps_from_lightnings_hooks_and_logs_its_figures(lightning_runs):
    folder, proc, report, _ = lightning_runs
    run = report["run"]
    assert 1 <= run["steps"] <= 3  # 3 asked for (fewer only if a busy machine left too few undisturbed)
    assert any("eval mode" in s["why"] for s in run["excluded_steps"])  # the validation step left out
    phases = run["breakdown_ms"]
    assert phases["forward"] > 0 and phases["backward"] > 0  # run inside optimizer.step(closure)
    assert phases["optimizer"] < phases["forward"] + phases["backward"]
    assert any("Lightning" in n and "callback" in n for n in report["notes"])
    rows = list(csv.DictReader((folder / "logs" / "lightning_logs" / "version_0" / "metrics.csv").open()))
    logged = [r for r in rows if r.get("perfaudit/step_ms")]
    assert len(logged) == 1 and float(logged[0]["perfaudit/SYNC001_ms_per_step"]) >= 0
    assert "findings at or above 'warning'" in proc.stderr  # action="warn": a warning, the run goes on


def test_the_lightning_callback_can_fail_the_run_and_gives_torch_back(tmp_path):
    pytest.importorskip("lightning", reason="Lightning is not installed (pip install -e '.[test]')")
    probe = tmp_path / "after.py"
    probe.write_text(
        "import runpy, sys, torch\n"
        "before = (torch.optim.Optimizer.zero_grad, torch.utils.data.DataLoader.__iter__, torch.autograd.backward)\n"
        f"sys.argv = ['lightning_cnn.py', '--fail']\n"
        "try:\n"
        f"    runpy.run_path({str(HERE / 'lightning_cnn.py')!r}, run_name='__main__')\n"
        "except Exception as exc:\n"
        "    print('raised', type(exc).__name__, exc)\n"
        "after = (torch.optim.Optimizer.zero_grad, torch.utils.data.DataLoader.__iter__, torch.autograd.backward)\n"
        "print('restored', all(a is b for a, b in zip(before, after)))\n")
    proc = _python(probe, cwd=tmp_path)
    assert "raised GateFailed perfaudit: findings at or above 'warning'" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "restored True" in proc.stdout
    assert "finished after" not in proc.stdout


def test_the_transformers_callback_gives_perfaudit_runs_findings_and_logs_through_the_trainer(tmp_path):
    pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[test]')")
    script = HERE / "hf_gpt2.py"
    proc = _python(script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    # read before `perfaudit run` runs the script again in the same folder: on a busy machine its window
    # outlasts the script's 12 steps, and the script then writes its own log_history.json over this one
    history = json.loads((tmp_path / "log_history.json").read_text())
    report = _callback_report(tmp_path)
    placed = _placed(report)
    assert {("SYNC001", "hf_gpt2.py", 31), ("DEBUG001", "hf_gpt2.py", 42)} <= placed, placed
    assert placed == _placed(_run(tmp_path, script))
    assert 1 <= report["run"]["steps"] <= 3
    assert any("Hugging Face" in n for n in report["notes"])
    logged = [e for e in history if "perfaudit/findings" in e]
    assert len(logged) == 1 and logged[0]["perfaudit/DEBUG001_ms_per_step"] > 0, proc.stderr[-3000:]
    assert "finished after 12 steps" in proc.stdout


def test_the_notebook_magic_audits_the_training_cell_at_its_lines(tmp_path):
    pytest.importorskip("IPython", reason="IPython is not installed (pip install -e '.[test]')")
    driver = HERE / "notebook_cells.py"
    proc = _python(driver, "notebook", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    assert said["error"] is None and 0 < said["steps_trained"] < 3 * 64  # the window ended the cell
    assert "IPython.core.display.HTML" in proc.stdout  # the report shown inline
    report = _callback_report(tmp_path)
    label = f"Cell In[{said['cell']}]"
    cell = _placed(report, label)
    assert _python(driver, "script", cwd=tmp_path).returncode == 0
    script = _placed(_run(tmp_path, tmp_path / "train.py"))
    # the cell's line n is the script's line n - 1 (its %%perfaudit line) + the setup cell's lines
    setup_lines = (tmp_path / "train.py").read_text().count("\n") - 9
    assert {("SYNC001", label, 9), ("GRAD001", label, 5)} <= cell, cell
    in_script = {(rule, line - 1 + setup_lines) for rule, _, line in cell}
    assert in_script == {(rule, line) for rule, _, line in script if line > setup_lines}
    assert f"{label}:9" in proc.stderr


def test_the_notebook_magic_fails_the_cell_at_the_gate(tmp_path):
    pytest.importorskip("IPython", reason="IPython is not installed (pip install -e '.[test]')")
    proc = _python(HERE / "notebook_cells.py", "fail", cwd=tmp_path)
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    assert said["error"] == "GateFailed", proc.stdout + proc.stderr[-2000:]


def test_perfaudit_run_names_accelerate_and_locates_the_loader_prepare_rebuilt_at_the_users_line(tmp_path):
    pytest.importorskip("accelerate", reason="accelerate is not installed (pip install -e '.[test]')")
    report = _run(tmp_path, HERE / "accelerate_mlp.py")
    lines = {f["rule"]: f["location"]["line"] for f in report["findings"] if f["severity"] != "info"}
    assert lines.get("OPT001") == 11, lines  # the optimizer prepare() wrapped, at the line that built it
    data = [f for f in report["findings"] if f["rule"] == "DATA001"]
    assert [f["location"]["line"] for f in data] == [13]  # the user's DataLoader(...), not prepare()'s copy
    assert any(n.startswith("Accelerate ") for n in report["notes"])


@pytest.mark.parametrize("pinned", [False, True])
def test_accelerates_own_batch_copies_get_accelerates_fix(tmp_path, pinned):
    """On the emulated device an Accelerate script's batches are moved by the loader prepare() wrapped, not
    by a `.to()` of the user's: COPY001 sits at the user's loop and its fix is Accelerate's (a pinned loader,
    `DataLoaderConfiguration(non_blocking=True)`), not "copy with x.to(device, non_blocking=True)"; with that
    fix applied the copies are pinned and non-blocking and COPY001 is silent."""
    pytest.importorskip("accelerate", reason="accelerate is not installed (pip install -e '.[test]')")
    out = tmp_path / "run.json"
    proc = perfaudit("run", "--out-dir", str(tmp_path / "run"), "-f", f"json={out}", "--warmup", "1",
                     "--steps", "3", str(HERE / "accelerate_glue.py"), *(["--", "--pinned"] if pinned else []),
                     cwd=tmp_path)
    assert proc.returncode == 0 and out.exists(), proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["run"]["device"] == "cpu, CUDA path emulated"
    copies = [f for f in report["findings"] if f["rule"] == "COPY001"]
    if pinned:
        assert not copies, copies
        return
    assert [f["location"]["line"] for f in copies] == [55], copies  # `for batch in train_dl:`
    assert "DataLoaderConfiguration(non_blocking=True)" in copies[0]["fix"] and "pin_memory=True" in copies[0]["fix"]
    # `perfaudit fix` makes that change: the loader pinned, the Accelerator made without a dataloader_config
    # given one (its import added), the one that has it left alone
    fixed = perfaudit("fix", str(HERE / "accelerate_glue.py"), "--from", str(tmp_path / "run"), cwd=tmp_path)
    diff = fixed.stdout
    assert "+from accelerate import Accelerator, DataLoaderConfiguration" not in diff  # imported already
    assert ('+        accelerator = Accelerator(mixed_precision="fp16", '
            'dataloader_config=DataLoaderConfiguration(non_blocking=True))') in diff, diff
    # the loader pinned (DATA001's workers beside it where its projected wait, 4-6 % of the step here, passed 5 %)
    [loader] = [line for line in diff.splitlines() if line.startswith("+    train_dl = DataLoader(")]
    assert "pin_memory=True" in loader and "pin_memory=args.pinned" not in loader, diff
    assert "not fixed automatically" not in diff, diff
