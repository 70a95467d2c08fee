"""The CUDA path on a CPU-only machine (`perfaudit run --device auto|cpu|emulate-cuda`): the script takes
its GPU branch on an emulated device, and what that branch does is reported as seen there. The realistic
CUDA-path scripts (tests/realistic/cuda_*.py) are checked against their markers in test_realistic."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import ROOT, perfaudit

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
    probes = json.loads(gzip.open(trace).read())["perfaudit"]["probes"] if trace.exists() else {}
    return json.loads(report.read_text()), probes, proc.stdout


def test_the_cuda_calls_of_a_training_script_are_served_and_recorded(tmp_path):
    """Device queries, set_device, seeds, memory queries, streams, events, autocast("cuda"), GradScaler,
    a pinning DataLoader and non_blocking copies: the script runs its CUDA branch to the window's end."""
    report, probes, console = _run(tmp_path, SCRIPTS / "cuda_api_tour.py")
    assert report["run"]["outcome"]["outcome"] == "window_complete", report["run"]["outcome"]
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
    """CUDA graphs have no CPU counterpart: the emulated run fails before its window, the script runs
    again on its CPU path, and the report says which call the emulation could not serve."""
    script = tmp_path / "graphs.py"
    script.write_text(
        "import torch\n"
        "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "model = torch.nn.Linear(16, 4).to(device)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "graph = torch.cuda.CUDAGraph() if device == 'cuda' else None\n"
        "for step in range(10_000):\n"
        "    loss = model(torch.randn(8, 16, device=device)).pow(2).mean()\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    optimizer.zero_grad()\n")
    report, _, console = _run(tmp_path, script, "--warmup", "1", "--steps", "2")
    assert report["run"]["outcome"]["outcome"] == "window_complete" and report["run"]["device"] == "cpu"
    note = next(n for n in report["notes"] if "could not serve" in n)
    assert "CUDAGraph" in note and "graphs.py:5" in note, note
    assert "could not serve" in console


def test_auto_emulates_only_a_script_with_a_cuda_path(tmp_path):
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


def test_the_device_is_set_in_the_config_file_and_checked(tmp_path):
    from perfaudit.config import load_config
    from perfaudit.errors import UsageError
    (tmp_path / "perfaudit.toml").write_text('device = "cpu"\n')
    assert load_config(str(tmp_path / "perfaudit.toml")).device == "cpu"
    (tmp_path / "perfaudit.toml").write_text('device = "gpu"\n')
    with pytest.raises(UsageError, match="auto, cpu, emulate-cuda"):
        load_config(str(tmp_path / "perfaudit.toml"))
    proc = perfaudit("run", str(SCRIPTS / "cuda_api_tour.py"), "--device", "tpu")
    assert proc.returncode == 2 and "--device: expected one of auto, cpu, emulate-cuda" in proc.stderr + proc.stdout
