"""A CPU run projected onto an H100 against the same scripts run on a real H100 (docs/accuracy.md).

    python benchmarks/bench_projection_vs_gpu.py [--reuse DIR] [--h200]

The references are in tests/data/h100_runs/ (README there): each script run plainly on an H100 (its step
without profiler or perfaudit, torch's memory peaks) and under `perfaudit run` there (the GPU timeline's own
split: data wait, compute, idle). Here each script runs under `perfaudit run` on this machine (the emulated
CUDA path, projected onto H100 SXM, the default): the projected step against the plain one (the issue's goal:
within ±25 %), the data share against the GPU's measured one (within 0.1), the bottleneck class against the
GPU timeline's, and the emulated device's peak memory against torch's on the H100. `--reuse DIR` reads the
reports a previous run left in DIR (NAME.json) instead of running the scripts again.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "h100_runs"
# the scripts with a CUDA path that ran alone on the GPU (group A), and the rest whose plain runs exist
CASES = ["tests/realistic/augmented_images.py", "tests/realistic/char_transformer.py",
         "tests/realistic/cnn_classifier.py", "tests/realistic/vae.py", "tests/realistic/device_built_lm.py",
         "tests/realistic/cuda_path_trainer.py", "tests/realistic/cuda_transforms_loader.py",
         "sample_scripts/clean_loop.py", "sample_scripts/amp_bad.py"]


def _name(script: str) -> str:
    return f"{Path(script).parent.name}_{Path(script).stem}"


def cpu_report(script: str, out: Path, target: str | None = None) -> dict:
    path = out / f"{_name(script)}.json"
    if not path.exists():
        subprocess.run([sys.executable, "-m", "perfaudit", "run", script, "--out-dir", str(out / _name(script)),
                        "-f", f"json={path}", *(("--target", target) if target else ())], cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600, check=False)
    return json.loads(path.read_text())


def against_h200(out: Path) -> None:
    """`--h200`: the same CPU runs projected onto an H200 against tests/data/h200_runs/plain_steps.json, whose
    plain steps are timed one by one too: the median step (epoch ends and logging steps left out, as the
    profiled window leaves them) beside the mean."""
    plain = {r["script"]: r for r in json.loads((ROOT / "tests/data/h200_runs/plain_steps.json").read_text())}
    print(f"load at start {os.getloadavg()[0]:.1f}; reports in {out}")
    print(f"{'script':<26}{'H200 mean':>10}{'median':>8}{'projected':>10}{'err (median)':>13}{'bottleneck':>11}")
    errors = []
    for script in CASES:
        ref, proj = plain[script], cpu_report(script, out, "H200").get("projection") or {}
        projected = proj.get("step_ms") or float("nan")
        err = 100 * (projected / ref["median_ms"] - 1)
        errors.append(abs(err))
        print(f"{Path(script).stem:<26}{ref['step_ms']:8.2f}ms{ref['median_ms']:6.2f}ms{projected:8.2f}ms"
              f"{err:12.0f}%{str(proj.get('bottleneck')):>11}")
    print(f"\nstep against the median: median |error| {statistics.median(errors):.0f} %, within ±25 %: "
          f"{sum(e <= 25 for e in errors)}/{len(CASES)}; load at the end {os.getloadavg()[0]:.1f}")


def main() -> None:
    reuse = Path(sys.argv[sys.argv.index("--reuse") + 1]) if "--reuse" in sys.argv else None
    out = reuse or Path(tempfile.mkdtemp(prefix="projection-vs-gpu-"))
    if "--h200" in sys.argv:
        return against_h200(out)
    runs = json.loads((DATA / "runs.json").read_text())
    plain = {r["script"]: r for r in json.loads((DATA / "plain_steps.json").read_text())}
    print(f"load at start {os.getloadavg()[0]:.1f}; reports in {out}")
    print(f"{'script':<26}{'H100 plain':>11}{'profiled':>9}{'identity':>9}{'projected':>10}{'err':>7}  "
          f"{'data: H100':>10}{'proj':>6}  {'bottleneck: H100':>16} {'proj':<6}"
          f"{'mem H100':>10}{'emulated':>9}{'err':>7}")
    step_err, data_err, agree, mem_err = [], [], 0, []
    for script in CASES:
        gpu, ref = runs[_name(script)], plain[script]
        cpu = cpu_report(script, out)
        proj = cpu.get("projection") or {}
        projected = proj.get("step_ms") or float("nan")
        err = 100 * (projected / ref["step_ms"] - 1)
        step_err.append(abs(err))
        measured = gpu["measured"]
        d_err = abs((proj.get("data_share") or 0) - measured["data_share"])
        data_err.append(d_err)
        ok = proj.get("bottleneck") == measured["class"]
        agree += ok
        memory = cpu.get("memory") or {}
        real = ref["window_peak_allocated"]
        m_err = 100 * (memory.get("peak_allocated_bytes", 0) / real - 1)
        mem_err.append(m_err)
        identity = gpu["identity_projection"]["step_ms"]
        print(f"{Path(script).stem:<26}{ref['step_ms']:9.2f}ms{gpu['step_ms']:7.2f}ms{identity:7.2f}ms"
              f"{projected:8.2f}ms{err:6.0f}%  "
              f"{measured['data_share']:10.2f}{proj.get('data_share') or 0:6.2f}  {measured['class']:>16} "
              f"{str(proj.get('bottleneck')):<6}{real / 1e6:8.1f}MB{memory.get('peak_allocated_bytes', 0) / 1e6:7.1f}MB"
              f"{m_err:6.1f}%{'' if ok else '  class differs'}")
    n = len(CASES)
    print(f"\nstep: median |error| {statistics.median(step_err):.0f} %, within ±25 %: "
          f"{sum(e <= 25 for e in step_err)}/{n}")
    print(f"data share: median |difference| {statistics.median(data_err):.2f}, within 0.1: "
          f"{sum(e <= 0.1 for e in data_err)}/{n}")
    print(f"bottleneck class: {agree}/{n}")
    print(f"peak allocated: median error {statistics.median(mem_err):+.1f} %, within ±10 %: "
          f"{sum(abs(e) <= 10 for e in mem_err)}/{n}, under by more than 5 %: {sum(e < -5 for e in mem_err)}")


if __name__ == "__main__":
    main()
