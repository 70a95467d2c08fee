"""The CUDA path on a CPU-only machine (`perfaudit run --device auto|cpu|emulate-cuda`): the script takes
its GPU branch on an emulated device, and what that branch does is reported as seen there. The realistic
CUDA-path scripts (tests/realistic/cuda_*.py) are checked against their markers in test_realistic."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from conftest import ROOT, perfaudit, run_trace_json

pytestmark = pytest.mark.skipif(__import__("torch").cuda.is_available(),
                                reason="a GPU is present: nothing is emulated on a GPU")
SCRIPTS = ROOT / "tests" / "scripts"


def _run(tmp_path: Path, script: Path, *extra: str) -> tuple[dict, dict, str]:
    """The JSON report, the recorded probes and the console output of one run."""
    report = tmp_path / "report.json"
    proc = perfaudit("run", str(script), "--out-dir", str(tmp_path / "run"), "-f", f"json={report}",
                     "-f", "console", *extra, cwd=script.parent)
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    trace = tmp_path / "run" / "trace.json.gz"
    probes = run_trace_json(trace)["perfaudit"]["probes"] if trace.exists() else {}
    return json.loads(report.read_text()), probes, proc.stdout


def _failed_as_on_a_gpu(report: dict, console: str, says: str, line: int) -> dict:
    """The run raised the GPU's RuntimeError (`says` in its message) at the script's `line`, and said the script
    fails the same way on a GPU; the outcome, for more checks."""
    outcome = report["run"]["outcome"]
    assert outcome["exception"] == "RuntimeError" and says in outcome["message"], outcome
    assert outcome["site"]["line"] == line and "fails the same way on a GPU" in console, outcome
    return outcome


def _cuda_path_failed(report: dict, console: str, says: str, line: int) -> dict:
    """The CUDA path raised the GPU's RuntimeError (`says` in its message) at the script's `line` before its first
    step, and the script ran again on its CPU branch, whose run is reported: the header says both. The CUDA
    path's outcome, for more checks."""
    outcome = report["run"]["outcome"]
    failed = outcome.get("gpu_path") or {}
    assert failed.get("exception") == "RuntimeError" and says in failed.get("message", ""), outcome
    assert failed["site"]["line"] == line and report["run"]["device"] == "cpu", outcome
    assert "CUDA path raised RuntimeError" in " ".join(console.split()) and "as a GPU raises it" in console, console
    return failed


def test_the_cuda_calls_of_a_training_script_are_served_and_recorded(tmp_path):
    """Device queries, set_device, seeds, memory queries, streams, events, autocast("cuda"), GradScaler,
    a pinning DataLoader and non_blocking copies: the script runs its CUDA branch to the window's end."""
    report, probes, console = _run(tmp_path, SCRIPTS / "cuda_api_tour.py")
    assert report["run"]["outcome"]["outcome"] in ("window_complete", "completed"), report["run"]["outcome"]
    assert report["run"]["steps"] >= 1
    assert report["run"]["device"] == "cpu, CUDA path emulated"
    assert "CUDA path emulated" in console and not any("could not serve" in n for n in report["notes"])
    seen = probes["cuda_emulation"]
    batches = [c for c in seen["copies"] if c["origin"] == "loader" and c["window_calls"]]
    assert len(batches) == 2 and all(c["pinned"] and c["non_blocking"] for c in batches), batches
    assert {(a["device_type"], a["dtype"]) for a in seen["autocast"]} == {("cuda", "bfloat16")}
    assert {"torch.cuda.synchronize", "Event.elapsed_time", "Event.synchronize"} <= {c["api"] for c in seen["calls"]}
    assert any(r["api"] == ".cpu()" for r in seen["reads"])
    # pinned, non_blocking batches overlap compute on a GPU: nothing to report on them
    assert not [f for f in report["findings"] if f["rule"] == "COPY001"]


def test_device_cpu_runs_the_cuda_path_script_as_it_runs_here(tmp_path, realistic_reports):
    """`--device cpu`: no emulation; what only the CUDA branch does (class weights rebuilt with the legacy
    torch.cuda.FloatTensor in every step) is then not seen, and the header does not claim it was."""
    script = ROOT / "tests" / "realistic" / "cuda_legacy_loop.py"
    report, probes, _ = _run(tmp_path, script, "--device", "cpu", "--warmup", "1", "--steps", "3")
    assert report["run"]["device"] == "cpu" and "cuda_emulation" not in probes
    legacy_line = next(i for i, line in enumerate(script.read_text().splitlines(), 1) if "torch.cuda.FloatTensor(" in line)

    def copy001_lines(rep):
        return {loc["line"] for f in rep["findings"] if f["rule"] == "COPY001" for loc in f["locations"]}
    assert legacy_line not in copy001_lines(report)
    emulated = realistic_reports["cuda_legacy_loop.py"]["run"]  # the same script under the default (auto)
    assert emulated["run"]["device"] == "cpu, CUDA path emulated"
    assert legacy_line in copy001_lines(emulated)


def test_a_cuda_call_the_emulation_cannot_serve_reruns_the_script_plainly(tmp_path):
    """A raw block from the caching allocator (torch.cuda.caching_allocator_alloc: a device pointer for a custom
    kernel) is not served: the emulated run fails before its window, the script runs again on its CPU path, and the
    report names the call the emulation could not serve and its line (no error of the script's, which a GPU would
    not raise)."""
    script = tmp_path / "pools.py"
    script.write_text(
        "import torch\n"
        "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "model = torch.nn.Linear(16, 4).to(device)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "block = torch.cuda.caching_allocator_alloc(1 << 20) if device == 'cuda' else None\n"
        "for step in range(10_000):\n"
        "    loss = model(torch.randn(8, 16, device=device)).pow(2).mean()\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    optimizer.zero_grad()\n")
    report, _, console = _run(tmp_path, script, "--warmup", "1", "--steps", "2")
    assert report["run"]["outcome"]["outcome"] == "window_complete" and report["run"]["device"] == "cpu"
    note = next(n for n in report["notes"] if "could not serve" in n)
    assert "torch.cuda.caching_allocator_alloc (a raw device pointer) is not served" in note, note
    assert "pools.py:5" in note, note
    assert "could not serve" in console


def test_a_memory_pool_on_the_cuda_path_is_served(tmp_path):
    """A trainer that keeps its step's buffers in a pool of their own (torch.cuda.MemPool, use_mem_pool): a CPU
    build stubs the pool out, and the run fell back to the CPU branch, its CUDA path unseen. The pool is served as a
    GPU's (an id, a use count while in use) and the CUDA path is audited: its host copy is found at its line."""
    script = tmp_path / "pooled.py"
    script.write_text(
        "import torch\n"
        "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(device)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "pool = torch.cuda.MemPool() if device.type == 'cuda' else None\n"
        "assert pool is None or (pool.use_count() == 1 and len(pool.id) == 2)\n"
        "\n"
        "\n"
        "def step(x):\n"
        "    if pool is None:\n"
        "        return model(x).pow(2).mean()\n"
        "    with torch.cuda.use_mem_pool(pool):\n"
        "        assert pool.use_count() == 2\n"
        "        return model(x).pow(2).mean()\n"
        "\n"
        "\n"
        "for it in range(10_000):\n"
        "    x = torch.randn(16, 32).to(device)\n"
        "    loss = step(x)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    optimizer.zero_grad()\n")
    report, _, console = _run(tmp_path, script, "--warmup", "1", "--steps", "3")
    assert report["run"]["outcome"]["outcome"] == "window_complete", report["run"]["outcome"]
    assert report["run"]["device"] == "cpu, CUDA path emulated", report["run"]["device"]
    assert not any("could not serve" in n for n in report["notes"]), report["notes"]
    assert ("COPY002", 18) in {(f["rule"], loc["line"]) for f in report["findings"] for loc in f["locations"]}


def test_auto_emulates_only_a_script_with_a_cuda_path(tmp_path, monkeypatch):
    from perfaudit.static.cuda_path import has_cuda_path
    plain = tmp_path / "plain" / "train.py"
    plain.parent.mkdir()
    plain.write_text("import torch\nmodel = torch.nn.Linear(2, 2)\n")
    assert not has_cuda_path(str(plain))
    helper = tmp_path / "helped"
    helper.mkdir()
    (helper / "train.py").write_text("import torch\nfrom utils import get_device\n"
                                     "model = torch.nn.Linear(2, 2).to(get_device())\n")
    (helper / "utils.py").write_text("import torch\n\ndef get_device():\n    return torch.accelerator.current_accelerator()\n")
    assert has_cuda_path(str(helper / "train.py"))
    framework = tmp_path / "hf"
    framework.mkdir()
    (framework / "train.py").write_text("from transformers import Trainer\n")
    assert has_cuda_path(str(framework / "train.py"))
    # minGPT's layout: projects/adder/adder.py imports the repository's own package, on PYTHONPATH or installed in
    # editable mode, whose Trainer picks "cuda"; an installed package's or the standard library's text is not read
    repo = tmp_path / "mingpt_repo"
    (repo / "mygpt").mkdir(parents=True)
    (repo / "mygpt" / "__init__.py").write_text("")
    (repo / "mygpt" / "trainer.py").write_text("import torch\n\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n")
    (repo / "projects" / "adder").mkdir(parents=True)
    adder = repo / "projects" / "adder" / "adder.py"
    adder.write_text("import json, typer\nfrom mygpt.trainer import device\n")
    assert not has_cuda_path(str(adder))  # not on the import path: nothing to read
    monkeypatch.syspath_prepend(str(repo))
    assert has_cuda_path(str(adder))
    (repo / "mygpt" / "trainer.py").write_text("device = 'cpu'\n")
    assert not has_cuda_path(str(adder))


def test_the_cuda_path_reader_takes_any_script_without_failing(tmp_path_factory):
    """The script's text names the modules it imports: any text, imports of any name, never fails the reader."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from perfaudit.static.cuda_path import has_cuda_path
    folder = tmp_path_factory.mktemp("any")
    names = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_.]{0,12}\Z", fullmatch=True) | st.sampled_from(
        ["__main__", "__future__", "os", "sys", "torch", "perfaudit", "hypothesis", "..", ".x"])
    lines = st.one_of(st.builds("import {}".format, names), st.builds("from {} import x".format, names),
                      st.text(max_size=40))

    @settings(max_examples=80, deadline=None)
    @given(st.lists(lines, max_size=8))
    def check(text):
        script = folder / "train.py"
        script.write_text("\n".join(text), encoding="utf-8", errors="surrogatepass")
        assert has_cuda_path(str(script)) in (True, False)

    check()


def test_the_device_is_set_in_the_config_file_and_checked(tmp_path):
    from perfaudit.errors import UsageError
    from perfaudit.policy.config import load_config
    (tmp_path / "perfaudit.toml").write_text('device = "cpu"\n')
    assert load_config(str(tmp_path / "perfaudit.toml")).device == "cpu"
    (tmp_path / "perfaudit.toml").write_text('device = "gpu"\n')
    with pytest.raises(UsageError, match="auto, cpu, emulate-cuda"):
        load_config(str(tmp_path / "perfaudit.toml"))
    proc = perfaudit("run", str(SCRIPTS / "cuda_api_tour.py"), "--device", "tpu")
    assert proc.returncode == 2 and "--device: expected one of auto, cpu, emulate-cuda" in proc.stderr + proc.stdout


REALISTIC = ROOT / "tests" / "realistic"


def _rules_at(report: dict, severities=("warning", "error")) -> set[tuple[str, int]]:
    return {(f["rule"], loc["line"]) for f in report["findings"] if f["severity"] in severities
            for loc in f["locations"]}


def test_a_script_that_trains_on_its_cpu_branch_gets_the_cpu_report(tmp_path, realistic_reports):
    """`--cuda` is off by default: offered a CUDA device, the script still trains on the CPU. The report
    says which branch ran and how to run the other, fires what `--device cpu` fires, and claims nothing
    of the GPU branch (its autocast is not reported missing)."""
    script = REALISTIC / "cuda_opt_in_flag.py"
    auto = realistic_reports[script.name]["run"]
    assert auto["run"]["device"] == "cpu, CUDA path offered but not taken"
    note = next(n for n in auto["notes"] if "CPU branch" in n)
    assert "-- --cuda" in note and "cuda_opt_in_flag.py:65" in note, note
    assert not [f for f in auto["findings"] if f["rule"] == "AMP002"]
    plain, _, _ = _run(tmp_path, script, "--device", "cpu")
    assert _rules_at(plain) <= _rules_at(auto), (_rules_at(plain), _rules_at(auto))


# rules whose verdict depends on what the code does, not on how fast this machine ran it
DETERMINISTIC = {"SYNC001", "BN001", "OPT001", "OPT002", "DEBUG001", "GRAD001", "DIST001", "MEM001"}


@pytest.mark.parametrize("name", ["cuda_legacy_rnn.py", "cuda_transforms_loader.py", "cuda_config_device.py",
                                  "device_built_lm.py", "dp_sgd_per_sample.py", "simclr_pretrain.py"])
def test_what_the_cpu_run_finds_the_default_run_finds_too(tmp_path, realistic_reports, name):
    """The GPU branch emulated (DataParallel and legacy types, a main-process transform pipeline, a model
    built with device=, per-sample gradients of torch.func from NumPy batches) or the CPU branch taken under
    the offer (a config's device): every finding of `--device cpu` stands at the same line in the default run,
    and only the branch that ran is claimed."""
    auto = realistic_reports[name]["run"]
    plain, _, _ = _run(tmp_path, REALISTIC / name, "--device", "cpu")
    placed = {(f["rule"], loc["line"]) for f in plain["findings"] if f["rule"] in DETERMINISTIC for loc in f["locations"]}
    assert placed <= _rules_at(auto, ("info", "warning", "error")), placed - _rules_at(auto, ("info", "warning", "error"))
    expected = "cpu, CUDA path offered but not taken" if name == "cuda_config_device.py" else "cpu, CUDA path emulated"
    assert auto["run"]["device"] == expected


def test_both_modes_tell_a_host_made_window_from_a_batch_copy(tmp_path, realistic_reports):
    """audio_keywords.py makes its STFT window on the host in every forward and moves it (COPY002), and moves
    unpinned DataLoader batches (COPY001). `--device cpu` found the window's move under COPY001 too (every
    `.to(device)` of a step counted as a batch's), and no window function counted as a factory."""
    path = REALISTIC / "audio_keywords.py"
    lines = path.read_text().splitlines()
    window = next(n for n, text in enumerate(lines, 1) if "hann_window(N_FFT).to(" in text)
    batch = next(n for n, text in enumerate(lines, 1) if "wave.to(device)" in text)
    plain, _, _ = _run(tmp_path, path, "--device", "cpu")
    for report in (plain, realistic_reports[path.name]["run"]):
        at = {(f["rule"], loc["line"]) for f in report["findings"] for loc in f["locations"]}
        assert ("COPY002", window) in at and ("COPY001", batch) in at and ("COPY001", window) not in at, at


@pytest.mark.parametrize("name,grouped_by", [("nanogpt_style.py", "clip_grad"), ("fp16_scaler_trainer.py", "adam")])
def test_clipping_and_fused_steps_read_nothing_back_from_the_device(realistic_reports, name, grouped_by):
    """clip_grad_norm_ and the fused optimizers group tensors by device in C++, which saw the emulated device's
    on the CPU: clipping moved its coefficient to "cpu", a blocking read a GPU never makes, every step (and the
    projection waited for the GPU's queue there); fused AdamW moved the GradScaler's scale and inf flag. The
    reads left are the GradScaler's own and the scripts'."""
    run_dir = Path(realistic_reports[name]["run_dir"])
    reads = run_trace_json(run_dir / "trace.json.gz")["perfaudit"]["probes"]["cuda_emulation"]["reads"]
    assert not [r for r in reads if grouped_by in str((r.get("inside") or {}).get("reader"))], reads


def test_the_gpu_switch_is_read_from_the_scripts_own_options(tmp_path):
    from perfaudit.static.gpu_switch import gpu_switch
    cases = {
        "p.add_argument('--use-cuda', action='store_true')\n": "-- --use-cuda",
        "p.add_argument('--no-cuda', action='store_true', default=False)\n": "without `--no-cuda`",
        "p.add_argument('--device', default='cpu')\n": "-- --device cuda",
        "p.add_argument('--accelerator', type=str, default='cpu')\n": "-- --accelerator gpu",
        "trainer = L.Trainer(max_epochs=3, accelerator='cpu')\n": 'accelerator="gpu"',
        "p.add_argument('--device', default='cuda')\n": None,  # the GPU is its default: nothing to pass
    }
    for i, (code, expected) in enumerate(cases.items()):
        script = tmp_path / f"train{i}.py"
        script.write_text("import argparse\np = argparse.ArgumentParser()\n" + code)
        found = gpu_switch(str(script))
        assert (found is None) if expected is None else (expected in found and f"train{i}.py:3" in found), (code, found)


def test_legacy_types_dataparallel_an_lstm_and_a_prefetch_thread_run_on_the_emulated_device(realistic_reports):
    """`.type(torch.cuda.FloatTensor)`, `nn.DataParallel(model).cuda()`, an LSTM that re-flattens its
    weights, a thread that moves batches to the device and memory logged as a ratio: the GPU branch runs
    to the window's end, and the copies made in the prefetch thread are no step's cost."""
    report = realistic_reports["cuda_legacy_rnn.py"]["run"]
    assert report["run"]["device"] == "cpu, CUDA path emulated"
    assert report["run"]["outcome"]["outcome"] == "window_complete"
    assert not any("could not serve" in n or "emulated CUDA device" in n for n in report["notes"]), report["notes"]
    rules = _rules_at(report)
    assert ("DIST001", 58) in rules and ("COPY002", 61) in rules
    assert not [loc for f in report["findings"] for loc in f["locations"] if loc["line"] == 47]


def _optimizer_script(tmp_path: Path, options: str) -> Path:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\nfrom torch import nn\n"
        "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024)).to(device)\n"
        f"optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3{options})\n"
        "x = torch.randn(32, 512, device=device)\n"
        "for step in range(100_000):\n"
        "    loss = model(x).square().mean()\n"
        "    optimizer.zero_grad()\n"
        "    loss.backward()\n"
        "    optimizer.step()\n")
    return script


@pytest.mark.parametrize("options,severity", [("", "info"), (", foreach=False", "warning"), (", fused=True", None)])
def test_the_optimizer_finding_describes_what_the_gpu_would_run(tmp_path, options, severity):
    """On the CUDA path torch picks foreach for AdamW: the fused kernel is the gain left (info, 1.6M
    parameters); the single-tensor loop asked for is a warning; fused=True is clean."""
    report, _, _ = _run(tmp_path, _optimizer_script(tmp_path, options), "--warmup", "1", "--steps", "3")
    assert report["run"]["device"] == "cpu, CUDA path emulated"
    found = [f for f in report["findings"] if f["rule"] == "OPT001"]
    if severity is None:
        assert not found
        return
    assert [f["severity"] for f in found] == [severity] and found[0]["locations"][0]["line"] == 5
    if severity == "info":
        assert "foreach on the CUDA path, fused available" in found[0]["message"]


def test_a_scripts_own_error_is_reported_as_the_scripts(tmp_path):
    """A ValueError in the script's code before any step is the script's: it is not blamed on the emulated
    device, and the script is not run a second time on its CPU path."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "model = torch.nn.Linear(4, 2).to(device)\n"
        "raise ValueError('config: unknown dataset \"imagenet-22k\"')\n")
    report, _, console = _run(tmp_path, script)
    outcome = report["run"]["outcome"]
    assert outcome["outcome"] == "raised" and outcome["exception"] == "ValueError"
    assert not any("could not serve" in n for n in report["notes"]) and "could not serve" not in console
    assert len([p for p in (tmp_path / "run").parent.iterdir() if p.name.startswith("run")]) == 1


def test_a_torch_op_refusing_the_scripts_call_on_the_device_is_the_scripts_error(tmp_path):
    """A shape bug in a CUDA-only script (one-hot labels of 9 classes against 10 logits) raises inside the torch
    op the emulated device ran for it: the script's error at its line, as on a GPU. It was taken for the
    emulation's (its code on the traceback), the script run again on its CPU path, which failed on `.cuda()`, and
    the report said the emulated device could not serve the script."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(8, 10).cuda()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(20):\n"
        "    x, y = torch.randn(4, 8, device='cuda'), torch.randint(0, 9, (4,), device='cuda')\n"
        "    soft = torch.nn.functional.one_hot(y, 9).float()\n"
        "    loss = -(soft * model(x).log_softmax(-1)).sum(-1).mean()\n"
        "    loss.backward()\n")
    report, _, console = _run(tmp_path, script)
    outcome = report["run"]["outcome"]
    assert (outcome["outcome"], outcome["exception"], outcome["site"]["line"]) == ("raised", "RuntimeError", 7), outcome
    assert "must match the size" in outcome["message"] and "could not serve" not in console
    assert "gpu_path" not in outcome  # its CPU path fails at `.cuda()`: it has no run of its own to report


def test_a_cuda_path_that_fails_as_a_gpu_would_is_said_and_the_cpu_branch_is_reported(tmp_path):
    """A contrastive loss that masks its similarity matrix with -1e9 under autocast: on CUDA the matrix is
    float16, and masked_fill refuses the value (a GPU raises the same; the CPU branch runs without autocast). The
    report led with that error and nothing else (a run of 0 steps, three source-only findings, where `--device
    cpu` found eight); now it says the CUDA path's error and where, how to fix it, and reports the CPU branch's
    run, whose findings it has. The exit code stays the script's failure."""
    script = tmp_path / "contrastive.py"
    script.write_text(
        "import torch\n"
        "import torch.nn.functional as F\n"
        "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "model = torch.nn.Linear(32, 16).to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(30):\n"
        "    x = torch.randn(64, 32).to(device)\n"
        "    with torch.autocast(device.type, enabled=device.type == 'cuda'):\n"
        "        z = F.normalize(model(x), dim=1)\n"
        "        sim = z @ z.t()\n"
        "        sim = sim.masked_fill(torch.eye(64, dtype=torch.bool, device=device), -1e9)\n"
        "        loss = F.cross_entropy(sim, torch.arange(64, device=device).roll(32))\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    print(loss.item())\n")
    report = tmp_path / "report.json"
    proc = perfaudit("run", str(script), "--out-dir", str(tmp_path / "run"), "-f", f"json={report}",
                     "-f", "console", cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(report.read_text())
    gpu_path = data["run"]["outcome"]["gpu_path"]
    assert (gpu_path["exception"], gpu_path["site"]["line"]) == ("RuntimeError", 11), gpu_path
    assert "Half without overflow" in gpu_path["message"]
    console = " ".join(proc.stdout.split())
    assert "the script's CUDA path raised RuntimeError" in console and "contrastive.py:11" in console, console
    note = next(n for n in data["notes"] if "CUDA path raised" in n)
    assert "float16" in note and "torch.finfo(x.dtype).min" in note and "CPU branch" in note
    assert data["run"]["steps"] >= 3 and data["run"]["device"] == "cpu", data["run"]
    assert {"COPY002", "SYNC001"} <= {f["rule"] for f in data["findings"] if f.get("locations")}, data["findings"]


def test_the_progress_line_says_why_the_cpu_branch_runs():
    """On a terminal the run's second start is not silent: the progress line says the CUDA path's error and that
    the CPU branch runs."""
    from perfaudit.cli.common import progress

    shown = []

    class Line:
        def update(self, text):
            shown.append(text)
    update = progress(Line(), "contrastive.py")
    update({"phase": "cpu_branch", "why": "its CUDA path raised RuntimeError at line 11"})
    assert shown[-1].startswith("contrastive.py: its CUDA path raised RuntimeError at line 11; running its CPU branch")


def test_ctrl_c_on_the_cpu_branch_after_the_cuda_path_failed_keeps_both(tmp_path):
    """A Ctrl-C while the CPU branch runs, after the CUDA path raised: exit 130, the CPU branch's recorded steps
    reported, and the CUDA path's error still said."""
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "train.py"
    script.write_text(
        "import time\n"
        "import torch\n"
        "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "model = torch.nn.Linear(32, 16).to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(30):\n"
        "    if step == 3:\n"
        "        time.sleep(3600)\n"
        "    x = torch.randn(64, 32, device=device)\n"
        "    with torch.autocast(device.type, enabled=device.type == 'cuda'):\n"
        "        sim = model(x) @ model(x).t()\n"
        "        loss = sim.masked_fill(torch.eye(64, dtype=torch.bool, device=device), -1e9).mean()\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n")
    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "perfaudit", "run", str(script), "--warmup", "1", "--steps", "5",
                             "--out-dir", str(tmp_path / "run"), "-f", f"json={out}"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    progress = tmp_path / "run" / "progress.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (progress.exists() and '"device": "cpu"' in progress.read_text()):
        time.sleep(0.2)
    time.sleep(1.5)  # the CPU branch is now asleep in its fourth step
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    report = json.loads(out.read_text())
    outcome = report["run"]["outcome"]
    assert outcome["outcome"] == "interrupted" and outcome["gpu_path"]["site"]["line"] == 12, outcome
    assert "CUDA path raised" in " ".join(stdout.split()) and "Traceback" not in stderr


def test_a_cuda_only_script_under_device_cpu_is_told_how_its_cuda_path_runs(tmp_path):
    """An older script that calls `torch.cuda.set_device` unconditionally fails under `--device cpu` (no CUDA
    device here): the report says the script needs one, where, and the option that runs its CUDA path."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "torch.cuda.set_device(0)\n"
        "model = torch.nn.Linear(4, 2).cuda()\n")
    report, _, console = _run(tmp_path, script, "--device", "cpu")
    assert report["run"]["outcome"]["outcome"] == "raised"
    note = next(n for n in report["notes"] if "needs a CUDA device" in n)
    assert "(at train.py:2)" in note and "--device emulate-cuda" in note and "needs a CUDA device" in console

def test_a_cuda_call_that_fails_on_both_paths_before_the_window_is_said_so(tmp_path):
    """A CUDA call that fails on the CPU path as on the emulated device (a custom allocator whose library is not
    there, loaded before training): both runs fail at that line before any step, and the note says so, not "after
    its window"."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "alloc = torch.cuda.memory.CUDAPluggableAllocator('./alloc.so', 'my_malloc', 'my_free')\n"
        "model = torch.nn.Linear(4, 2).cuda()\n")
    report, _, _ = _run(tmp_path, script)
    assert report["run"]["outcome"]["outcome"] == "raised"
    note = next(n for n in report["notes"] if "the script raised" in n)
    assert "at train.py:2 before its window, on the emulated CUDA device and on its CPU path alike" in note, note

def test_pinning_a_dataset_of_device_tensors_fails_as_on_a_gpu(tmp_path):
    """A Dataset that returns CUDA tensors under `DataLoader(pin_memory=True)` raises "cannot pin" on any GPU;
    the emulated device raised nothing (it pinned them), so a fix or a script that does this passed. Now it
    raises as a GPU does, at the loop that fetches the batch, and the error is the script's: the report says a
    GPU fails the same way there, and reports the script's CPU branch (whose host tensors pin)."""
    source = (ROOT / "tests" / "realistic" / "gpu_resident_dataset.py").read_text()
    script = tmp_path / "train.py"
    script.write_text(source.replace("shuffle=True)", "shuffle=True, pin_memory=True)"))
    report, _, console = _run(tmp_path, script, "--warmup", "1", "--steps", "3")
    line = next(n for n, text in enumerate(script.read_text().splitlines(), 1) if text.strip() == "for x, y in loader:")
    _cuda_path_failed(report, console, "cannot pin 'torch.cuda.FloatTensor'", line)
    assert not any("could not serve" in n for n in report["notes"]) and "could not serve" not in console


def test_memory_and_cudnn_queries_answer_as_a_gpu_would(tmp_path):
    """Scripts divide by the reserved bytes, log the peak each epoch or cudnn's version: the emulated device
    answers from the bytes it holds (never 0), its peak holds the training step's activations (gone by the
    time the script asks: once 8 MiB where the step held 40), and it is the run's target GPU by name, memory
    and compute capability, so the script runs past its window and branches as on that GPU. Its CUDA has a
    version a script can parse (a CPU build's is None), and NCCL one; the report keeps the build's own."""
    script = tmp_path / "train.py"
    out = tmp_path / "answers.txt"
    script.write_text(
        "import torch\n"
        "torch.cuda.random.manual_seed_all(0)\n"  # torch.cuda's functions by their own modules' names too
        "model = torch.nn.Linear(1024, 1024).cuda()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "torch.cuda.memory.reset_peak_memory_stats()\n"
        "for step in range(8):\n"
        "    model(torch.randn(4096, 1024, device='cuda')).sum().backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
        "used = torch.cuda.memory_allocated() / torch.cuda.memory_reserved()\n"
        "stats = torch.cuda.memory_stats()\n"
        "props = torch.cuda.get_device_properties(0)\n"
        "free, _ = torch.cuda.mem_get_info()\n"
        f"open({str(out)!r}, 'w').write(f'{{torch.cuda.memory_allocated()}} {{used}} "
        "{stats[\"allocated_bytes.all.peak\"]} {torch.cuda.max_memory_allocated()} {torch.backends.cudnn.version()} "
        "{props.total_memory - free - torch.cuda.memory_reserved()} "
        "{int(torch.version.cuda.split(\".\")[0])} "
        "{torch.cuda.nccl.version()[0]} "
        "{props.total_memory} {props.major}.{props.minor} {props.multi_processor_count} {props.name}')\n")
    report, _, _ = _run(tmp_path, script, "--warmup", "1", "--steps", "2", "--full", "--target", "A10")
    assert report["run"]["outcome"]["outcome"] in ("completed", "window_complete"), report["run"]["outcome"]
    allocated, ratio, peak, max_allocated, version, outside, cuda, nccl, total, capability, sms, name = \
        out.read_text().split(maxsplit=11)
    assert int(allocated) >= 1024 * 1024 * 4 and 0 < float(ratio) <= 1 and int(version) > 0
    # a step held the weights, their gradients, the 16 MiB batch and the 16 MiB output at once: the peak the
    # report estimates, the cuBLAS workspaces in it
    assert int(peak) == int(max_allocated) == report["memory"]["peak_allocated_bytes"] >= int(allocated) + 2 ** 24
    assert (int(total), capability, int(sms)) == (24 * 2 ** 30, "8.6", 72) and name.startswith("A10 "), name
    assert int(outside) == 750 << 20  # mem_get_info's free leaves out the CUDA context and libraries, as on a GPU
    assert int(cuda) >= 12 and report["run"]["environment"]["cuda"] == torch.version.cuda and int(nccl) == 2


def test_a_bare_gpu_index_puts_the_model_on_the_emulated_device(tmp_path):
    """`model.to(0)` (the DDP tutorial series' `gpu_id`, a `local_rank`) is CUDA's device 0 on a GPU build; a CPU
    build asks for an accelerator it lacks and raises, so the emulated run fell back to the CPU branch, where it
    raised again: nothing was measured. Each way of naming the device by its index runs the CUDA path."""
    script = tmp_path / "train.py"
    out = tmp_path / "placed.txt"
    script.write_text(
        "import torch\n"
        "local_rank = 0\n"
        "model = torch.nn.Linear(16, 4).to(local_rank)\n"
        "head = torch.nn.Linear(4, 2).to(device=local_rank)\n"
        "opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)\n"
        "for step in range(6):\n"
        "    x = torch.randn(8, 16).to(local_rank, non_blocking=True)\n"
        "    noise = torch.randn(8, 2, device=local_rank)\n"
        "    loss = (head(model(x)) + noise).square().mean()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
        f"open({str(out)!r}, 'w').write(f'{{model.weight.device}} {{head.bias.is_cuda}} {{x.cuda(0).device}}')\n")
    report, _, _ = _run(tmp_path, script, "--warmup", "1", "--steps", "3", "--full")
    assert report["run"]["device"] == "cpu, CUDA path emulated" and report["run"]["steps"] == 3, report["run"]
    assert out.read_text() == "cuda:0 True cuda:0"
    copies = {loc["line"] for f in report["findings"] if f["rule"] == "COPY002" for loc in f["locations"]}
    assert copies == {7}, report["findings"]  # the batch made in the step and moved: seen on the device


def _sgd_steps(batch: str) -> str:
    """Six SGD steps of a script's `model` on `batch`, a Python expression."""
    return ("opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "for step in range(6):\n"
            f"    model({batch}).sum().backward()\n"
            "    opt.step()\n"
            "    opt.zero_grad()\n")


def _ran_the_cuda_path(tmp_path: Path, script: Path) -> dict:
    """The report of a run of `script` (1 warm-up, 3 measured steps) that trained on the emulated device."""
    report, _, console = _run(tmp_path, script, "--warmup", "1", "--steps", "3")
    assert report["run"]["device"] == "cpu, CUDA path emulated" and report["run"]["steps"] == 3, console
    return report


def test_a_checkpoint_loaded_onto_the_gpu_is_on_the_emulated_device(tmp_path):
    """A script that resumes from a checkpoint loads it with `map_location="cuda:0"` (pytorch/examples' imagenet),
    a device, a dict, or a function calling `storage.cuda(gpu)`; this CPU build cannot restore a storage to CUDA
    and raised, so such a script was reported from its CPU branch. Each form now loads its tensors onto the
    emulated device, a map to the CPU keeps them on the host, and the CUDA path runs."""
    script = tmp_path / "resume.py"
    out = tmp_path / "where.txt"
    script.write_text(
        "import os, torch\n"
        "gpu = 0\n"
        "model = torch.nn.Linear(8, 2).cuda(gpu)\n"
        "path = os.path.join(os.path.dirname(__file__), 'ckpt.pth')\n"
        "torch.save({'model': model.state_dict(), 'epoch': 3, 'scale': [torch.ones(2)]}, path)\n"
        "loads = [torch.load(path, map_location=f'cuda:{gpu}'), torch.load(path, map_location=torch.device('cuda')),\n"
        "         torch.load(path, map_location={'cpu': 'cuda:0'}),\n"
        "         torch.load(path, map_location=lambda storage, loc: storage.cuda(gpu)),\n"
        "         torch.load(path, map_location='cpu')]\n"
        "where = [str(s['model']['weight'].device) + '/' + str(s['scale'][0].is_cuda) for s in loads]\n"
        f"open({str(out)!r}, 'w').write(' '.join(where))\n"
        "model.load_state_dict(loads[0]['model'])\n"
        + _sgd_steps("torch.randn(4, 8, device='cuda')"))
    _ran_the_cuda_path(tmp_path, script)
    assert out.read_text() == " ".join(["cuda:0/True"] * 4 + ["cpu/False"])


def test_a_cuda_default_tensor_type_makes_factories_place_on_the_device(tmp_path):
    """`torch.set_default_tensor_type("torch.cuda.FloatTensor")` (older research code: nerf-pytorch's first line)
    makes every factory without a device, and `torch.Tensor(data)`, make a CUDA tensor; this CPU build refused the
    type and the script failed on both paths. The emulated device makes CUDA the default device, and a CPU type turns it back."""
    script = tmp_path / "train.py"
    out = tmp_path / "types.txt"
    script.write_text(
        "import torch\n"
        "torch.set_default_tensor_type(torch.cuda.FloatTensor)\n"
        "made = [torch.randn(2).is_cuda, torch.zeros(2).dtype, torch.Tensor([1.0, 2.0]).is_cuda]\n"
        "torch.set_default_tensor_type('torch.cuda.DoubleTensor')\n"
        "made += [torch.ones(2).dtype]\n"
        "torch.set_default_tensor_type('torch.FloatTensor')\n"
        "made += [torch.ones(2).is_cuda, torch.ones(2).dtype]\n"
        "torch.set_default_tensor_type('torch.cuda.FloatTensor')\n"
        f"open({str(out)!r}, 'w').write(' '.join(map(str, made)))\n"
        "model = torch.nn.Linear(8, 1)\n"
        + _sgd_steps("torch.randn(4, 8)"))
    report = _ran_the_cuda_path(tmp_path, script)
    assert out.read_text() == "True torch.float32 True torch.float64 False torch.float32"
    assert report["memory"]["peak_allocated_bytes"] > 0  # the model made by default on the device is its memory


def test_the_emulated_gpu_reports_the_memory_a_real_one_reports():
    """torch.cuda's total_memory on an H100 80GB HBM3 is 85,017,493,504 bytes (79.2 GiB, tests/data/h100_runs),
    not the datasheet's 80 GiB: a script sizing its batch from it sizes it as there. Each figure comes from a
    trace of that GPU; a GPU without one answers its datasheet's GiB."""
    from perfaudit.facts.gpu.projection import emulated_gpu
    from perfaudit.trace import load_trace
    for target, trace in (("H100 SXM", "h100_runs/traces/device_built_lm.json.gz"),
                          ("H200", "h200_runs/traces/policy_gradient.json.gz"),
                          ("A100 80GB", "gpu_traces/hta/negative_queue_a100_rank0.json.gz"),
                          ("V100", "gpu_traces/hta/df_index_resolver_v100_rank1.json.gz")):
        recorded = load_trace(str(ROOT / "tests" / "data" / trace)).device_properties["totalGlobalMem"]
        assert emulated_gpu(target)["total_memory"] == recorded, target
    assert emulated_gpu("L4")["total_memory"] == 24 << 30


def test_the_gpu_switch_reader_takes_any_file_without_failing(tmp_path_factory):
    """The script is the user's and may be anything: text that is no Python, deep nesting, odd bytes. The
    reader answers a switch or None, never an exception."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from perfaudit.static.gpu_switch import gpu_switch
    folder = tmp_path_factory.mktemp("hostile")
    script = folder / "train.py"
    pieces = st.sampled_from(["p.add_argument(", "'--cuda'", "action='store_true'", "default=", "'cpu'", ")", "(",
                              "[", "\n", "import utils\n", "accelerator=", "\x00", "\udcff", "#", "'", '"""'])

    @settings(max_examples=60, deadline=None)
    @given(st.lists(pieces, max_size=60), st.integers(0, 3000))
    def check(parts, depth):
        script.write_bytes(("".join(parts) + "(" * depth).encode("utf-8", "surrogateescape"))
        found = gpu_switch(str(script))
        assert found is None or isinstance(found, str)
    check()


def test_the_scripts_own_amp_switch_is_read_back_from_the_region_it_turns_on(tmp_path):
    """An autocast region entered with `enabled=` off: the option that sets that value (through a config's
    attribute), else an option named for mixed precision that is off by default; nothing when the code does not
    say (a constant, or `not args.no_amp`, whose option turns it off)."""
    from perfaudit.static.gpu_switch import amp_switch
    region = "with torch.autocast('cuda', enabled={}):\n    pass\n"
    cases = [
        ("p.add_argument('--mixed', action='store_true')\n", "cfg.mixed", ("--mixed", str(tmp_path / "train0.py"), 4)),
        ("p.add_argument('--half-precision', dest='hp', action='store_true')\n", "self.args.hp",
         ("--half-precision", str(tmp_path / "train1.py"), 4)),
        ("p.add_argument('--fp16', action='store_true')\n", "use_amp", ("--fp16", str(tmp_path / "train2.py"), 4)),
        ("p.add_argument('--amp', action='store_true', default=True)\n", "args.amp", None),  # on already
        ("p.add_argument('--lr', type=float)\n", "False", None),
        ("p.add_argument('--no-amp', action='store_true')\n", "not args.no_amp", None),
    ]
    for i, (option, enabled, expected) in enumerate(cases):
        script = tmp_path / f"train{i}.py"
        script.write_text("import argparse\nimport torch\np = argparse.ArgumentParser()\n" + option
                          + region.format(enabled))
        assert amp_switch(str(script), str(script), 5) == expected, (option, enabled)


def test_the_amp_switch_reader_takes_any_file_without_failing(tmp_path_factory):
    """The script (and the file its autocast region is in) is the user's and may be anything."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from perfaudit.static.gpu_switch import amp_switch
    folder = tmp_path_factory.mktemp("hostile_amp")
    script = folder / "train.py"
    pieces = st.sampled_from(["p.add_argument(", "'--amp'", "action='store_true'", "dest=", "enabled=", "not ",
                              "cfg.amp", "torch.autocast(", ")", "(", "\n", "\x00", "\udcff", "#", "'", '"""'])

    @settings(max_examples=60, deadline=None)
    @given(st.lists(pieces, max_size=60), st.integers(0, 3000), st.integers(-5, 80))
    def check(parts, depth, line):
        script.write_bytes(("".join(parts) + "(" * depth).encode("utf-8", "surrogateescape"))
        for region in (script, folder / "absent.py"):
            found = amp_switch(str(script), str(region), line)
            assert found is None or (isinstance(found, tuple) and isinstance(found[0], str) and found[2] > 0)
    check()


def test_a_scripts_own_amp_flag_is_the_fix_it_is_given(realistic_reports):
    """text_classifier.py enters `torch.autocast` with `enabled=self.cfg.amp`, set by `--amp` (off by default):
    AMP002 says the region is there, switched off, and its fix is the script's own option, not new code."""
    amp = next(f for f in realistic_reports["text_classifier.py"]["run"]["findings"] if f["rule"] == "AMP002")
    assert any(re.search(r"enters `torch.autocast` for CUDA at \S*text_classifier.py:111, switched off", n)
               for n in amp["notes"]), amp["notes"]
    assert re.match(r"Turn on the script's own mixed precision: pass `--amp` to the script \(its option at "
                    r"\S*text_classifier.py:142;", amp["fix"]), amp["fix"]


def test_a_batch_assembled_in_the_step_names_where_the_step_made_it(realistic_reports):
    """graph_classifier.py makes its graphs (torch.randn at line 15) once before training, and each step
    assembles a batch from them with a label tensor and a graph-id vector it makes itself (line 29). The first
    step shares the data's step clock, so its copies looked made where the data was; the window's copies are
    placed where the window's tensors were made. The pooling helper's `int(batch.max().item() + 1)`, in a
    module of the script's own, is a sync at that module's line."""
    findings = realistic_reports["graph_classifier.py"]["run"]["findings"]
    copy = next(f for f in findings if f["rule"] == "COPY002")
    assert re.search(r"made at \S*graph_classifier.py:29\b", copy["message"]), copy["message"]
    sync = next(f for f in findings if f["rule"] == "SYNC001")
    assert ("graph_ops.py", 6) in {(Path(loc["path"]).name, loc["line"]) for loc in sync["locations"]}, sync["locations"]


def test_a_sample_moved_in_a_fetch_is_recorded_as_the_general_path_records_it():
    """`sample.to(device)` in a Dataset's `__getitem__` takes a fast path from its second move at a line on
    (one Python frame: the profiler records every call the mode makes); its copy record, the tensor's place
    and what `.to()` returns must be what the general path gives."""
    import torch

    from perfaudit.collect.emulation.placement import Placement

    general_records = []

    def moves(mode: Placement, general: bool) -> tuple[dict, list]:
        if general:
            mode.handlers[torch.Tensor.to] = mode._to
        else:  # counted: the general path's record of a copy, which the fast path leaves out
            record = mode._copy_in
            mode._copy_in = lambda *a, **k: (general_records.append(a), record(*a, **k))  # type: ignore[method-assign]
        pinned = torch.ones(4)
        mode.pinned.add(pinned)  # as pin_memory() notes it on the emulated device
        step: list = [None]
        mode.window_step = lambda: step[0]
        out = []
        with mode:
            mode.in_fetch = True
            for i, src in enumerate([pinned, torch.ones(8), torch.ones(2, 3), pinned, torch.ones(8), torch.ones(16)]):
                step[0] = [None, None, 3, 3, 4, 4][i]
                moved = src.to("cuda", non_blocking=i < 3) if i % 2 else src.to(torch.device("cuda"))
                out.append((moved is src, moved.is_cuda, tuple(moved.shape), moved.data_ptr() != src.data_ptr()))
            mode.in_fetch = False
        return {k[1:]: {f: v for f, v in e.items() if f != "site"} for k, e in mode.copies.items()}, out

    fast, general = moves(Placement(), False), moves(Placement(), True)
    assert fast == general and len(general_records) == 1  # the first move at the line only
    (record,) = fast[0].values()
    assert record["calls"] == 6 and record["window_calls"] == 4 and record["by_step"] == {"3": 2, "4": 2}
    assert record["bytes"] == 64 and not record["pinned"] and not record["non_blocking"]


POOLING_LIBRARY = '''\
import torch


def global_mean_pool(x, batch):
    """A graph library's pooling, as PyG writes it: the number of graphs read from the batch vector."""
    size = int(batch.max()) + 1
    out = torch.zeros(size, x.shape[1], device=x.device).index_add_(0, batch, x)
    count = torch.zeros(size, device=x.device).index_add_(0, batch, torch.ones_like(batch, dtype=x.dtype))
    return out / count.clamp(min=1).unsqueeze(1)
'''
GNN_SCRIPT = '''\
import torch
from torch import nn
from graphpool import global_mean_pool


class GraphClassifier(nn.Module):
    def __init__(self, features=16, hidden=32, classes=2):
        super().__init__()
        self.embed, self.head = nn.Linear(features, hidden), nn.Linear(hidden, classes)

    def forward(self, x, batch):
        return self.head(global_mean_pool(self.embed(x).relu(), batch))  # expect: SYNC001


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = GraphClassifier().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
nodes = torch.randn(500, 16, device=device)
batch = torch.arange(500, device=device) // 10
labels = torch.randint(0, 2, (50,), device=device)
for step in range(100_000):
    loss = nn.functional.cross_entropy(model(nodes, batch), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
'''


def test_a_device_read_inside_an_installed_librarys_function_is_a_sync_at_the_users_call(tmp_path):
    """A graph library's pooling reads `int(batch.max())` every step: on a GPU a sync, made inside library
    code the step calls. The emulated device saw the read of a device value at the user's call, so SYNC001
    places it there, whole; the optimizer's reads of its own host step counters (library code too) stay out."""
    packages = tmp_path / "site-packages" / "graphpool"
    packages.mkdir(parents=True)
    (packages / "__init__.py").write_text(POOLING_LIBRARY)
    script = tmp_path / "train.py"
    script.write_text(GNN_SCRIPT)
    report_path = tmp_path / "report.json"
    proc = perfaudit("run", str(script), "--warmup", "1", "--steps", "3", "--out-dir", str(tmp_path / "run"),
                     "-f", f"json={report_path}", cwd=tmp_path, env={"PYTHONPATH": str(packages.parent)})
    assert report_path.exists(), proc.stdout + proc.stderr
    syncs = [f for f in json.loads(report_path.read_text())["findings"] if f["rule"] == "SYNC001"]
    line = next(n for n, text in enumerate(GNN_SCRIPT.splitlines(), 1) if "expect: SYNC001" in text)
    assert [(loc["line"], loc.get("count_per_step")) for f in syncs for loc in f["locations"]] == [(line, 1.0)], syncs


@pytest.mark.timing
def test_a_frameworks_device_reads_are_syncs_and_its_optimizers_step_counters_are_not(realistic_reports):
    """Under `trainer.train()` the emulated device saw the Trainer read the loss (its nan/inf filter, two reads
    a step): SYNC001 there, at two per step, named with the option that removes them. AdamW's per-parameter step
    counters, read by torch inside the same call, are host tensors on a GPU too (no sync): they made it 14."""
    report = realistic_reports["hf_trainer_optim.py"]["run"]
    sync = next(f for f in report["findings"] if f["rule"] == "SYNC001")
    (where,) = sync["locations"]
    assert where["code"].startswith("trainer.train()") and where["count_per_step"] == pytest.approx(2.0)
    assert "nan/inf filter" in where["detail"] and "logging_nan_inf_filter=False" in where["detail"]


def test_a_moved_tensor_is_a_copy_the_script_may_write_either_side_of(tmp_path):
    """A move to the emulated device shares the source's bytes until one side writes (copy-on-write): a
    Dataset that normalises each moved sample in place, a batch edited on the device, and host data edited
    after its move all behave as with a real copy. The script checks it and raises if not."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\nfrom torch import nn\n"
        "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "data = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64)\n"
        "snapshot = data.clone()\n\n\n"
        "class Samples(torch.utils.data.Dataset):\n"
        "    def __len__(self):\n        return 64\n\n"
        "    def __getitem__(self, i):\n"
        "        x = data[i].to(device)\n"
        "        x.mul_(0.5)  # normalised on the device, in place\n"
        "        return x\n\n\n"
        "loader = torch.utils.data.DataLoader(Samples(), batch_size=8)\n"
        "model = nn.Linear(64, 1).to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=1e-9)\n"
        "for epoch in range(100):\n"
        "    for xb in loader:\n"
        "        moved = data[:8].to(device)\n"
        "        moved.sub_(1.0)\n"
        "        kept = data[0].cuda() if device == 'cuda' else data[0].clone()\n"
        "        data[0, 0] += 1000.0\n"
        "        if not (kept[0] == snapshot[0, 0] and moved[0, 0] == snapshot[0, 0] - 1):\n"
        "            raise SystemExit('a device copy changed with its source')\n"
        "        data[0, 0] -= 1000.0\n"
        "        fresh = torch.ones(8, 64)\n"
        "        on = fresh.to(device)\n"
        "        on.add_(1.0)\n"
        "        fresh.mul_(3.0)\n"
        "        if not (fresh.sum() == 3 * 8 * 64 and on.sum() == 2 * 8 * 64):\n"
        "            raise SystemExit('a whole tensor and its device copy share a write')\n"
        "        if not (torch.equal(data, snapshot) and torch.equal(xb, snapshot[:8] * 0.5)):\n"
        "            raise SystemExit('the host data changed with its device copy')\n"
        "        loss = model(xb.to(device)).pow(2).mean()\n"
        "        opt.zero_grad()\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        "        break\n")
    report, _, _ = _run(tmp_path, script, "--warmup", "1", "--steps", "3")
    assert report["run"]["device"] == "cuda (emulated)" or "emulated" in str(report["run"]["device"]), report["run"]
    assert report["run"]["outcome"]["outcome"] in ("window_complete", "completed"), report["run"]["outcome"]
    assert report["run"]["steps"] >= 1


def test_every_way_of_moving_a_model_puts_it_on_the_device(tmp_path):
    """`model.to(device=..., dtype=...)` left the model on the host (nn.Module.to's argument parser took the
    factory path), and so did every model built on the device: `nn.Linear(..., device="cuda")`,
    `nn.Parameter(cuda_tensor)`, `with torch.device("cuda")`, `torch.set_default_device("cuda")`, a meta
    model's `to_empty(device="cuda")` (a Parameter is a new tensor object; the default device is a mode
    below the emulation's). The script saw `weight.device == cpu`, and a script that trained such a model
    was reported as taking its CPU branch. Each way puts the parameters on the device, in the dtype asked for."""
    script = tmp_path / "train.py"
    out = tmp_path / "devices.txt"
    script.write_text(
        "import torch\n"
        "from torch import nn\n"
        "dev = torch.device('cuda')\n"
        "moves = {'to(dev)': lambda m: m.to(dev),\n"
        "         'to(device=, dtype=)': lambda m: m.to(device=dev, dtype=torch.bfloat16),\n"
        "         'to(dev, dtype)': lambda m: m.to(dev, torch.bfloat16),\n"
        "         'to(dtype).to(dev)': lambda m: m.to(torch.half).to(dev), 'cuda()': lambda m: m.cuda(),\n"
        "         'to(\"cuda:0\", non_blocking=True)': lambda m: m.to('cuda:0', non_blocking=True),\n"
        "         'to_empty from meta': lambda m: nn.Linear(4, 4, device='meta').to_empty(device=dev)}\n"
        "def built_on_device():\n"
        "    with torch.device('cuda'):\n"
        "        yield 'with torch.device', nn.Linear(4, 4)\n"
        "    torch.set_default_device('cuda')\n"
        "    yield 'set_default_device', nn.Linear(4, 4)\n"
        "    torch.set_default_device('cpu')\n"
        "    yield 'Linear(device=)', nn.Linear(4, 4, device=dev)\n"
        "    p = nn.Parameter(torch.zeros(4, 4, device=dev))\n"
        "    yield 'Parameter(cuda tensor)', type('M', (), {'weight': p, 'bias': p})()\n"
        f"with open({str(out)!r}, 'w') as f:\n"
        "    for name, m in [(name, move(nn.Linear(4, 4))) for name, move in moves.items()] + list(built_on_device()):\n"
        "        f.write(f'{name}|{m.weight.device}|{m.weight.is_cuda}|{m.bias.device}|{m.weight.dtype}\\n')\n"
        "model = nn.Sequential(nn.Linear(4, 4, device=dev, dtype=torch.bfloat16))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(8):\n"
        "    model(torch.randn(2, 4, device=dev, dtype=torch.bfloat16)).sum().backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n")
    report, probes, _ = _run(tmp_path, script, "--warmup", "1", "--steps", "2")
    assert report["run"]["device"] == "cpu, CUDA path emulated", report["run"]
    rows = [line.split("|") for line in out.read_text().splitlines()]
    assert len(rows) == 11 and all(r[1:4] == ["cuda:0", "True", "cuda:0"] for r in rows), rows
    assert {r[0]: r[4] for r in rows}["to(device=, dtype=)"] == "torch.bfloat16"
    assert probes["device_memory"]["by_category"]["parameters"] > 0


def test_a_buffer_allocated_pinned_is_pinned_on_the_emulated_device(tmp_path):
    """`torch.empty(..., pin_memory=True)` raised on a CPU build ("no pinned memory allocator"), so the
    emulated device could not serve a script that stages batches in a pinned buffer, and the run fell back
    to the CPU path. The buffer is now made and noted as pinned: its copies are pinned and non-blocking, as on
    a GPU machine, and nothing asks for pinned memory."""
    report, probes, console = _run(tmp_path, SCRIPTS / "pinned_staging.py", "--warmup", "1", "--steps", "3")
    assert report["run"]["device"] == "cpu, CUDA path emulated", report["notes"]
    assert "could not serve" not in console
    copies = [c for c in probes["cuda_emulation"]["copies"] if c["window_calls"]]
    assert copies and all(c["pinned"] and c["non_blocking"] for c in copies), copies
    assert "COPY001" not in {f["rule"] for f in report["findings"]}


def test_offloaded_activations_leave_the_emulated_device(tmp_path):
    """`save_on_cpu(pin_memory=True)` packs saved tensors in a hook the emulated device's mode does not reach:
    it asked for pinned memory a CPU build does not have, and the run fell back to the CPU path. Now the
    GPU branch runs, and what it offloads leaves the device as on a GPU: the step's activations go, and its
    peak with them."""
    (tmp_path / "kept").mkdir()
    (tmp_path / "offloaded").mkdir()
    kept, _, _ = _run(tmp_path / "kept", SCRIPTS / "offload_trainer.py", "--steps", "2", "--", "--no-offload")
    report, _, console = _run(tmp_path / "offloaded", SCRIPTS / "offload_trainer.py", "--steps", "2")
    assert report["run"]["device"] == "cpu, CUDA path emulated", report["notes"]
    assert "could not serve" not in console
    activations = kept["memory"]["by_category"]["activations"]
    assert activations > 16 << 20                               # 4 MB saved per layer's input and ReLU output
    # at the peak (in backward) only the tensors the running nodes brought back are on the device
    assert report["memory"]["by_category"].get("activations", 0) < activations / 2
    assert report["memory"]["peak_allocated_bytes"] < kept["memory"]["peak_allocated_bytes"] - activations / 4


def test_cuda_autocast_runs_in_16_bits_on_the_emulated_device_as_cudas_policy_says(tmp_path):
    """A CUDA autocast region leaves the emulated device's (CPU) tensors alone: its math ran in float32, and a
    bfloat16 conv net's memory was over-estimated by 42 % against the H100. Now the region's matrix math runs in
    bfloat16 and CUDA's float32 ops (layer_norm, softmax) in float32, as the script sees on a GPU; the estimate
    of the step's activations drops with it."""
    script = SCRIPTS / "amp_trainer.py"
    (tmp_path / "amp").mkdir()
    (tmp_path / "fp32").mkdir()
    amp, _, _ = _run(tmp_path / "amp", script, "--warmup", "1", "--steps", "2")
    log = (tmp_path / "amp" / "run" / "script.log").read_text()
    assert "dtypes clamped=False layer_norm=float32 linear=bfloat16 logits=bfloat16 loss=float32 softmax=float32" in log, \
        log[-2000:]
    plain, _, _ = _run(tmp_path / "fp32", script, "--warmup", "1", "--steps", "2", "--", "--no-amp")
    assert "linear=float32" in (tmp_path / "fp32" / "run" / "script.log").read_text()
    acts = [r["memory"]["by_category"]["activations"] for r in (amp, plain)]
    assert acts[0] < 0.85 * acts[1], acts   # the saved softmax stays float32, as on a GPU: not half
    assert "AMP002" in {f["rule"] for f in plain["findings"]} and "AMP002" not in {f["rule"] for f in amp["findings"]}


def test_float16_autocast_runs_in_float16_and_the_scripts_float16_branch_runs(tmp_path):
    """float16 autocast ran as bfloat16 on the emulated device (the same bytes): a script's `dtype == float16`
    branch (transformers' T5 clamps its float16 activations) did not run, and a float16 overflow could not
    happen. The region now computes in float16, as a V100 or T4 would."""
    _, probes, _ = _run(tmp_path, SCRIPTS / "amp_trainer.py", "--warmup", "1", "--steps", "2", "--", "--dtype", "float16")
    log = (tmp_path / "run" / "script.log").read_text()
    assert "dtypes clamped=True layer_norm=float32 linear=float16 logits=float16 loss=float32 softmax=float32" in log, \
        log[-2000:]
    assert {(a["device_type"], a["dtype"]) for a in probes["cuda_emulation"]["autocast"]} == {("cuda", "float16")}


def test_a_host_tensor_meeting_a_device_tensor_raises_as_on_a_gpu(tmp_path):
    """The emulated device computes on the CPU, where a window made on the host multiplies into a batch on the
    device without complaint; a GPU raises "Expected all tensors to be on the same device". The run fails as a
    GPU run fails, at the line, and says the script fails the same way there."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(400, 8).cuda()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(20):\n"
        "    x = torch.randn(16, 400, device='cuda')\n"
        "    window = torch.hann_window(400)\n"
        "    loss = model(x * window).pow(2).mean()\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n")
    report, _, console = _run(tmp_path, script)
    outcome = _failed_as_on_a_gpu(report, console, "same device", 7)
    assert "the tensor on the host was made at train.py:6" in outcome["message"], outcome


def test_sequence_lengths_moved_to_the_device_refuse_to_pack_as_on_a_gpu(tmp_path):
    """`pack_padded_sequence` takes its lengths on the CPU only: lengths moved to the device with the batch raise
    on a GPU ("'lengths' argument should be a 1D CPU int64 tensor", pytorch/pytorch#43227, the seq2seq tutorials'
    classic). The emulated device packed them without complaint; it raises as a GPU does, at the user's call."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "from torch.nn.utils.rnn import pack_padded_sequence\n"
        "rnn = torch.nn.GRU(8, 16, batch_first=True).cuda()\n"
        "opt = torch.optim.SGD(rnn.parameters(), lr=0.1)\n"
        "for step in range(20):\n"
        "    x, lengths = torch.randn(4, 10, 8).cuda(), torch.tensor([10, 7, 5, 2]).cuda()\n"
        "    _, h = rnn(pack_padded_sequence(x, lengths, batch_first=True))\n"
        "    opt.zero_grad()\n"
        "    h.pow(2).mean().backward()\n"
        "    opt.step()\n")
    report, _, console = _run(tmp_path, script)
    _failed_as_on_a_gpu(report, console, "'lengths' argument should be a 1D CPU int64 tensor, but got 1D cuda:0 Long "
                                         "tensor", 7)
    script.write_text(script.read_text().replace("pack_padded_sequence(x, lengths,", "pack_padded_sequence(x, lengths.cpu(),"))
    fixed, _, _ = _run(tmp_path, script)
    assert fixed["run"]["outcome"]["outcome"] in ("window_complete", "completed"), fixed["run"]["outcome"]


@pytest.mark.parametrize("layer,feed,says", [
    ("torch.nn.Conv2d(3, 8, 3)", "torch.randn(64, 3, 8, 8)", "Input type (torch.FloatTensor) and weight type "
                                                              "(torch.cuda.FloatTensor) should be the same"),
    ("torch.nn.Embedding(100, 8)", "torch.randint(0, 100, (64, 8))", "Expected all tensors to be on the same device")])
def test_a_batch_never_moved_to_the_device_fails_there_as_on_a_gpu(tmp_path, layer, feed, says):
    """The loop forgets `x.to(device)`: a GPU's convolution or embedding refuses the DataLoader's host batch (the
    most common first error of a CUDA port); the emulated device, computing on the CPU, ran it. It raises the
    GPU's error at the user's line, and says the host tensor is a DataLoader batch."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        f"model = torch.nn.Sequential({layer}, torch.nn.Flatten(1), torch.nn.LazyLinear(4)).cuda()\n"
        f"loader = DataLoader(TensorDataset({feed}), batch_size=16)\n"
        "for epoch in range(3):\n"
        "    for (x,) in loader:\n"
        "        loss = model(x).float().pow(2).mean()\n"
        "        loss.backward()\n")
    report, _, console = _run(tmp_path, script)
    outcome = _failed_as_on_a_gpu(report, console, says, 7)
    assert "the tensor on the host is a DataLoader batch" in outcome["message"], outcome


def test_a_lazy_module_moved_before_its_first_forward_runs_on_the_device(tmp_path):
    """`nn.LazyConv2d`/`nn.LazyLinear` moved with `.cuda()` before any forward (their parameters placeholders whose
    shape, storage and size torch refuses): the emulated device gave up ("could not serve this script") and the
    CPU path's `.cuda()` then failed. They move, materialise on the device at the first forward, and train."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Sequential(torch.nn.LazyConv2d(8, 3), torch.nn.ReLU(), torch.nn.Flatten(),\n"
        "                            torch.nn.LazyLinear(10)).cuda()\n"
        "model(torch.randn(2, 3, 16, 16, device='cuda'))  # the dry run that materialises the parameters\n"
        "assert all(p.is_cuda and p.shape[0] for p in model.parameters())\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(20):\n"
        "    loss = model(torch.randn(16, 3, 16, 16, device='cuda')).logsumexp(1).mean()\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n")
    report, _, _ = _run(tmp_path, script)
    assert report["run"]["outcome"]["outcome"] in ("window_complete", "completed"), report["run"]["outcome"]
    assert report["run"]["device"] == "cpu, CUDA path emulated" and report["run"]["steps"] >= 1
    assert not any("could not serve" in n for n in report["notes"]), report["notes"]


def test_only_what_a_gpu_refuses_across_devices_raises():
    """A known host tensor of one dimension or more meets a device tensor in arithmetic, a product, a concatenation
    or a loss, a gather or a scatter: raised. A 0-dim host tensor (a scalar to CUDA kernels), host indices, a copy
    across, and a tensor the device cannot tell the origin of (made by code it does not see): run as on a GPU."""
    import torch
    import torch.nn.functional as F

    from perfaudit.collect.emulation.cuda_shim import AS_ON_A_GPU
    from perfaudit.collect.emulation.placement import Placement
    mode = Placement()
    with mode:
        x = torch.randn(4, 3, device="cuda")
        labels = torch.tensor([0, 1, 2, 0])                      # left on the host
        weights = torch.ones(3)                                  # class weights never moved
        unknown = torch.nn.Linear(3, 3).weight.detach()[:1]      # made inside torch: the device cannot tell
        refused = [lambda: x * torch.hann_window(3), lambda: torch.cat([x, torch.zeros(1, 3)]),
                   lambda: F.cross_entropy(x, labels), lambda: F.cross_entropy(x, labels.cuda(), weight=weights),
                   lambda: x @ torch.eye(3), lambda: torch.ones(4, 3) < x,
                   lambda: torch.where(x > 0, torch.zeros(4, 3), torch.ones(4, 3)),
                   lambda: x.index_select(0, labels), lambda: weights.index_select(0, labels.cuda()),
                   lambda: x.gather(1, labels[:, None]), lambda: torch.gather(weights[None], 1, labels[None].cuda()),
                   lambda: torch.zeros(4, 3, device="cuda").scatter_(1, labels.unsqueeze(1), 1.0),
                   lambda: x.scatter_add(0, labels[:, None].expand(4, 3), torch.ones(4, 3)),
                   lambda: torch.take_along_dim(x, labels[:, None], dim=1)]
        allowed = [lambda: x * torch.tensor(2.0), lambda: x[torch.tensor([0, 1])], lambda: x.copy_(torch.zeros(4, 3)),
                   lambda: F.cross_entropy(x, labels.cuda(), weight=weights.cuda()), lambda: x + unknown,
                   lambda: x[labels > 0], lambda: torch.where(x > 0, x, 0.0)]
        for call in refused:
            with pytest.raises(RuntimeError, match="same device"):
                call()
        # a host tensor indexed on the device: a GPU's indexing refuses it
        for call in (lambda: labels[torch.tensor([0, 1], device="cuda")], lambda: weights[x[0] > 0]):
            with pytest.raises(RuntimeError, match="indices should be either on cpu or on the same device"):
                call()
        for call in allowed:
            call()
    assert any("same device" in m for m in AS_ON_A_GPU)


def test_a_script_under_set_default_device_cuda_runs_on_the_emulated_device(tmp_path):
    """`torch.set_default_device("cuda")` puts torch's DeviceContext at the bottom of the mode stack, where it
    gives every factory call without a device the GPU, perfaudit's own among them: the emulation's probe of the
    CPU's 16-bit math (made inside an autocast region's first matmul) asked the CPU build for a CUDA tensor, and
    a GPT-style script with bf16 autocast was run again on its CPU branch. perfaudit's own tensors are the host's."""
    script = tmp_path / "default_device_lm.py"
    script.write_text(
        "import torch\nimport torch.nn.functional as F\n"
        "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "torch.set_default_device(device)\n"
        "qkv, head = torch.nn.Linear(32, 96), torch.nn.Linear(32, 64)\n"
        "opt = torch.optim.AdamW([*qkv.parameters(), *head.parameters()], lr=1e-3)\n"
        "state = torch.cuda.get_rng_state() if device == 'cuda' else None\n"
        "data = torch.randint(0, 64, (4096,), device='cpu')\n"
        "for step in range(12):\n"
        "    ix = torch.randint(len(data) - 17, (8,), device='cpu')\n"
        "    x = torch.stack([data[i:i + 16] for i in ix]).to(device)\n"
        "    h = F.one_hot(x, 64)[..., :32].float() + torch.arange(16)[:, None] / 16\n"
        "    with torch.autocast(device_type=device, dtype=torch.bfloat16):\n"
        "        q, k, v = qkv(h).view(8, 16, 3, 1, 32).unbind(2)\n"
        "        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),\n"
        "                                           is_causal=True)\n"
        "        loss = F.cross_entropy(head(y.transpose(1, 2).flatten(2)).flatten(0, 1), x.flatten())\n"
        "    opt.zero_grad(set_to_none=True)\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "print('rng state on', state.device, 'params on', qkv.weight.device)\n")
    report, _, out = _run(tmp_path, script, "--warmup", "1", "--steps", "2", "--full")  # to the script's print
    assert report["run"]["device"] == "cpu, CUDA path emulated", report["notes"]
    assert not any("could not serve" in n for n in report["notes"]), report["notes"]
    assert "rng state on cpu params on cuda:0" in (tmp_path / "run" / "script.log").read_text()
    copies = next(f for f in report["findings"] if f["rule"] == "COPY001")
    assert copies["location"]["line"] == 11   # the batch stacked on the host and moved


def test_activation_checkpointing_and_custom_backward_run_on_the_emulated_device(tmp_path):
    """A segmentation trainer checkpointing stages that end in a custom autograd Function failed on the emulated
    device: the checkpoint's recompute read other devices than the forward had (CheckpointError before the first
    step), so nothing was measured. On a GPU the recompute matches."""
    script = tmp_path / "checkpointed.py"
    script.write_text(
        "import torch\nimport torch.nn as nn\nfrom torch.utils.checkpoint import checkpoint\n"
        "class ScaledGelu(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    @torch.amp.custom_fwd(device_type='cuda')\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        return nn.functional.gelu(x) * 2\n"
        "    @staticmethod\n"
        "    @torch.amp.custom_bwd(device_type='cuda')\n"
        "    def backward(ctx, g):\n"
        "        (x,) = ctx.saved_tensors\n"
        "        return g * 2\n"
        "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "stages = nn.ModuleList(nn.Sequential(nn.Conv2d(c, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),\n"
        "                                     nn.Dropout2d(0.1)) for c in (3, 8)).to(device)\n"
        "opt = torch.optim.SGD(stages.parameters(), lr=0.1)\n"
        "for step in range(30):\n"
        "    x = torch.rand(4, 3, 16, 16, device=device)\n"
        "    with torch.autocast(device, dtype=torch.bfloat16):\n"
        "        for s in stages:\n"
        "            x = checkpoint(lambda t, s=s: ScaledGelu.apply(s(t)), x, use_reentrant=False)\n"
        "        loss = x.float().mean()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n")
    report, _, _ = _run(tmp_path, script, "--warmup", "1", "--steps", "2")
    assert report["run"]["device"] == "cpu, CUDA path emulated", report["notes"]
    assert report["run"]["outcome"]["outcome"] in ("window_complete", "completed"), report["run"]["outcome"]
    assert report["run"]["steps"] >= 1


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_checkpointed_block_is_recomputed_on_the_device_under_cudas_autocast_policy(tmp_path, reentrant):
    """GPT-2's `gelu_new` under bf16 autocast, checkpointed: CUDA's autocast runs its `pow` in float32. The
    recompute runs in the backward pass, which the script started through the emulated device's mode with the
    mode set aside: there the block ran on the CPU unseen, `pow` in bfloat16, and the non-reentrant checkpoint
    raised CheckpointError (the tensors' dtypes differed). Both recomputes now run on the device, as the forward."""
    script = tmp_path / "gelu_new.py"
    out = tmp_path / "seen.txt"
    script.write_text(
        "import torch\nfrom torch import nn\nfrom torch.utils.checkpoint import checkpoint\n"
        "lin = nn.Linear(64, 64).cuda()\n"
        f"seen = open({str(out)!r}, 'w')\n"
        "def block(x):\n"
        "    h = lin(x)\n"
        "    cubed = torch.pow(h, 3.0)\n"
        "    seen.write(f'{torch.is_grad_enabled()} {cubed.dtype} {cubed.device}\\n')\n"
        "    seen.flush()\n"
        "    return 0.5 * h * (1.0 + torch.tanh(0.79 * (h + 0.044715 * cubed)))\n"
        "opt = torch.optim.AdamW(lin.parameters())\n"
        "for step in range(30):\n"
        "    x = torch.randn(8, 64, device='cuda', requires_grad=True)\n"
        "    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
        f"        loss = checkpoint(block, x, use_reentrant={reentrant}).float().pow(2).mean()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n")
    report, _, _ = _run(tmp_path, script, "--warmup", "1", "--steps", "2")
    assert report["run"]["outcome"]["outcome"] in ("window_complete", "completed"), report["run"]["outcome"]
    calls = out.read_text().splitlines()
    assert len(calls) >= 6 and set(calls) == {f"{not reentrant} torch.float32 cuda:0", "True torch.float32 cuda:0"}, calls


SEED_EVERYTHING = """import os, random, sys
import numpy as np
import torch
from torch import nn
def seed_everything(seed=42):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only="--warn" in sys.argv)
if "--config" in sys.argv:
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
seed_everything()
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    x, y = torch.randn(16, 32, device=device), torch.randint(0, 4, (16,), device=device)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize("option", ["", "--config", "--warn"])
def test_deterministic_algorithms_without_cublas_config_fail_as_on_a_gpu(tmp_path, option):
    """A seed_everything() that turns on torch.use_deterministic_algorithms(True) without CUBLAS_WORKSPACE_CONFIG:
    a GPU's first matrix product raises torch's "... because it uses CuBLAS ..." (a CPU's raises nothing, and the
    emulated device trained on). It raises here too, at the product's line (and the CPU branch, which trains,
    is reported); with the variable set, or `warn_only=True`, the script trains."""
    script = tmp_path / "seeded.py"
    script.write_text(SEED_EVERYTHING)
    report, _, _ = _run(tmp_path, script, "--warmup", "1", "--steps", "2", *(["--", option] if option else []))
    outcome = report["run"]["outcome"]
    if option:
        assert outcome["outcome"] in ("window_complete", "completed"), outcome
        return
    assert outcome["gpu_path"]["outcome"] == "raised" and "because it uses CuBLAS" in outcome["gpu_path"]["message"]
    assert outcome["gpu_path"]["site"]["line"] == 21 and outcome["outcome"] == "window_complete"  # model(x)


def test_bce_loss_in_a_cuda_autocast_region_raises_as_on_a_gpu(tmp_path):
    """CUDA's autocast refuses binary_cross_entropy on the device's tensors ("unsafe to autocast"), the CPU's
    allows it: a sigmoid + nn.BCELoss model under float16 autocast trained here and got a report, and stops at
    its loss on a GPU. It stops there on the emulated device too; outside the region (its `enabled=False`
    inner region, as the script's evaluation does) the loss runs."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\nimport torch.nn as nn\n"
        "dev = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "model = nn.Sequential(nn.Linear(16, 1), nn.Sigmoid()).to(dev)\n"
        "opt, crit = torch.optim.Adam(model.parameters()), nn.BCELoss()\n"
        "x, y = torch.randn(8, 16, device=dev), torch.rand(8, 1, device=dev).round()\n"
        "with torch.autocast(dev, dtype=torch.float16), torch.autocast(dev, enabled=False):\n"
        "    print('evaluation loss', crit(model(x), y).item())\n"
        "for step in range(20):\n"
        "    with torch.autocast(dev, dtype=torch.float16):\n"
        "        loss = crit(model(x), y)\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n")
    report, _, console = _run(tmp_path, script, "--warmup", "1", "--steps", "2")
    _cuda_path_failed(report, console, "unsafe to autocast", 11)  # past its evaluation: the region is undone


def test_numpy_of_a_device_tensor_raises_as_on_a_gpu():
    """`out.argmax(1).numpy()` in a step: a GPU raises TypeError (a device tensor has no host memory to share), the
    emulated device's CPU tensor converted and the run reported a sync instead. It raises as a GPU does; `.cpu()`
    first, and a host tensor, convert as there (np.asarray too)."""
    import numpy as np
    import torch

    from perfaudit.collect.emulation.placement import Placement
    mode = Placement()
    with mode:
        out = torch.randn(4, 3, device="cuda")
        for call in (lambda: out.argmax(1).numpy(), lambda: np.asarray(out)):
            with pytest.raises(TypeError, match="can't convert cuda:0 device type tensor to numpy"):
                call()
        assert out.argmax(1).cpu().numpy().shape == (4,) and np.asarray(torch.ones(2)).shape == (2,)
    assert len(mode.reads) == 1   # the .cpu(): a read; the refused calls read nothing


def test_a_dataset_moving_samples_to_cuda_in_forked_workers_fails_as_on_a_gpu(tmp_path):
    """A Dataset whose __getitem__ calls `.cuda()`, read by forked workers after the model went to the device: on
    a GPU each worker raises "Cannot re-initialize CUDA in forked subprocess". The emulated run's workers raised
    this CPU build's own "not linked with support for cuda devices", taken for a call the emulated device could not
    serve: the script was run again on its CPU path, which failed elsewhere. Now the run fails as on a GPU, and the
    outcome says the worker's own error, not only "Caught RuntimeError in DataLoader worker process 0"."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\nfrom torch.utils.data import DataLoader, Dataset\n"
        "class Samples(Dataset):\n"
        "    def __len__(self):\n        return 256\n"
        "    def __getitem__(self, i):\n"
        "        return torch.randn(8).to(torch.float32).cuda(), torch.tensor(i % 2).to('cuda')\n"
        "model = torch.nn.Linear(8, 2).cuda()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x, y in DataLoader(Samples(), batch_size=16, num_workers=2):\n"
        "    loss = torch.nn.functional.cross_entropy(model(x), y)\n"
        "    opt.zero_grad()\n    loss.backward()\n    opt.step()\n")
    report, _, console = _run(tmp_path, script, "--warmup", "1", "--steps", "2")
    outcome = report["run"]["outcome"]
    assert "Cannot re-initialize CUDA in forked subprocess" in outcome["message"], outcome
    assert outcome["site"]["line"] == 10 and "fails the same way on a GPU" in console, outcome
    assert not any("could not serve" in n for n in report["notes"]), report["notes"]


@pytest.mark.parametrize("lengths, fires", [("[60, 90, 75, 120, 100, 85]", True), ("[80]", False)])
def test_varying_batch_shapes_are_seen_when_the_budget_leaves_two_measured_steps(tmp_path, lengths, fires):
    """An emulated step writes more trace than a CPU step (its allocations are the device's), so the budget
    can leave two measured steps where `--device cpu` keeps three: the warm-up step's shapes count too (its
    probes' own dispatches of an op are not the script's), and batches padded to their own longest
    utterance are still seen to change; fixed-size batches stay silent."""
    script = tmp_path / "asr.py"
    script.write_text(
        "import torch\nfrom torch import nn\nfrom torch.nn.utils.rnn import pad_sequence\n"
        "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        f"LENGTHS = {lengths}\n"
        "def collate(step):\n"
        "    longest = LENGTHS[step % len(LENGTHS)]\n"
        "    feats = [torch.randn(n, 40) for n in (longest, longest // 2, longest - 7)]\n"
        "    return pad_sequence(feats, batch_first=True)\n"
        "model = nn.Sequential(nn.Conv1d(40, 64, 3, padding=1), nn.GELU(), nn.Conv1d(64, 29, 1)).to(device)\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
        "for step in range(200):\n"
        "    x = collate(step).to(device)\n"
        "    loss = model(x.transpose(1, 2)).log_softmax(1).mean()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n")
    report, _, _ = _run(tmp_path, script, "--warmup", "1", "--steps", "2")
    assert report["run"]["steps"] == 2 and "emulated" in report["run"]["device"]
    shape = [f for f in report["findings"] if f["rule"] == "SHAPE001"]
    assert bool(shape) == fires, shape
    if fires:  # every step padded to its own longest: each differs (a busy machine records extra steps)
        said = re.search(r"in (\d+)% of the recorded steps \((\d+) distinct shape sets; "
                         r"e\.g\. aten::convolution input \[3, 40, (\d+)\] vs \[3, 40, (\d+)\]\)", shape[0]["message"])
        assert said and int(said[1]) >= 50 and int(said[2]) >= 3 and said[3] != said[4], shape[0]["message"]


def test_a_generator_of_the_other_device_fails_as_on_a_gpu(tmp_path):
    """A policy-gradient loop seeded for reproducibility samples its actions on the device with a host generator:
    a GPU raises "Expected a 'cuda' device type for generator but found 'cpu'" at that line (the emulated device
    drew on the CPU and ran on). Now the CUDA path stops there as a GPU's does, and its CPU branch is reported."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "from torch import nn\n"
        "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "rng = torch.Generator().manual_seed(0)\n"
        "policy = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 4)).to(device)\n"
        "opt = torch.optim.Adam(policy.parameters(), lr=1e-3)\n"
        "for episode in range(10_000):\n"
        "    obs = torch.randn(16, 8, device=device)\n"
        "    probs = torch.softmax(policy(obs), dim=-1)\n"
        "    actions = torch.multinomial(probs, 1, generator=rng)\n"
        "    loss = -(torch.log(probs.gather(1, actions)) * torch.randn(16, 1, device=device)).mean()\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n")
    report, _, console = _run(tmp_path, script, "--warmup", "1", "--steps", "2")
    _cuda_path_failed(report, console, "Expected a 'cuda' device type for generator but found 'cpu'", 10)
    assert report["run"]["steps"] >= 1


def test_whatever_a_checkpoint_holds_its_tensors_restored_to_cuda_and_only_those_are_placed():
    """torch.load can return any object a file pickled (weights_only=False): nested containers, cycles, other
    objects. The emulated load places exactly the tensors on a storage torch would have restored to CUDA, and
    never fails the script."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from perfaudit.collect.emulation.moves.checkpoints import _place
    from perfaudit.collect.emulation.placement import Placement

    leaves = st.one_of(st.builds(lambda n: torch.zeros(n), st.integers(0, 3)), st.integers(), st.text(max_size=3),
                       st.none(), st.floats(allow_nan=True))
    objects = st.recursive(leaves, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(st.text(max_size=2), inner, max_size=4)),
        max_leaves=12)

    @settings(max_examples=60, deadline=None)
    @given(objects, st.data())
    def check(loaded, data):
        if isinstance(loaded, list):
            loaded.append(loaded)  # a cycle
        tensors = list(_walk(loaded))
        chosen = data.draw(st.lists(st.sampled_from(tensors), unique_by=id)) if tensors else []
        mode = Placement()
        _place(mode, loaded, [t.untyped_storage() for t in chosen])
        assert {id(t) for t in tensors if mode.on_device.has(t)} == {id(t) for t in chosen}

    check()


def _walk(obj, seen=None):
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        yield obj
    elif id(obj) not in seen and isinstance(obj, (list, tuple, dict)):
        seen.add(id(obj))
        for item in obj.values() if isinstance(obj, dict) else obj:
            yield from _walk(item, seen)
