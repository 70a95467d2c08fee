"""The emulated CUDA device's cost: `perfaudit run --device emulate-cuda` against `--device cpu` on the
same scripts, same window, run alternately in one session.

    python benchmarks/bench_emulation.py              # the realistic CUDA-path scripts, 3 rounds
    python benchmarks/bench_emulation.py --rounds 1   # quicker

Prints, per script, the wall time of the whole run (start-up, window, report), the mean measured step
(the profiled window's step, stacks on), the step timed after the window without the profiler (the
interception's cost on its own) and the trace size of both, and their ratios (emulated / plain);
and the interception's own share of the emulated step, read from its trace: the self time of the emulated
device's Python (perfaudit/collect/emulation/) and of the bookkeeping builtins and added copies it calls,
not the ops it serves. A step ratio above it is the script's CUDA branch doing other work than its CPU
branch (a GradScaler, foreach or fused optimizers, autocast), computed here on the CPU.
The goal: an emulated run's measured step is at most 1.3x a plain CPU run's step (issue 27, issue 38: on
real scripts, per-sample DataLoader work in the main process included), and its wall time too.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["tests/realistic/cuda_path_trainer.py", "tests/realistic/cuda_legacy_loop.py",
           "tests/realistic/host_tensors.py", "tests/realistic/cnn_classifier.py",
           "tests/realistic/char_transformer.py", "tests/realistic/cuda_transforms_loader.py",
           "tests/realistic/dataset_transforms.py", "tests/realistic/cuda_legacy_rnn.py",
           "tests/realistic/cuda_opt_in_flag.py", "tests/realistic/vae.py", "tests/realistic/simclr_pretrain.py",
           "tests/realistic/wave_denoiser.py"]


def one_run(script: str, device: str, out: Path) -> dict:
    report = out / "report.json"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "perfaudit", "run", script, "--device", device, "--out-dir",
                           str(out / "run"), "-f", f"json={report}"], cwd=ROOT / Path(script).parent,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    data = json.loads(report.read_text()) if report.exists() else {}
    run = data.get("run") or {}
    trace = out / "run" / "trace.json.gz"
    unprofiled = [s["wall_ms"] for s in run.get("unprofiled_steps") or []]
    return {"wall_s": wall, "step_ms": run.get("step_ms"), "device": run.get("device"), "rc": proc.returncode,
            "plain_ms": statistics.median(unprofiled) if unprofiled else None,
            "trace_kb": trace.stat().st_size / 1024 if trace.exists() else None,
            "own_ms": interception_ms(trace) if device == "emulate-cuda" and trace.exists() else None}


_BOOKKEEPING = ("of dict object", "isinstance", "function id>", "len>", "KeyedRef", "getattr", "_getframe",
                "get_ident", "method clone of")


def interception_ms(trace: Path) -> float | None:
    """The emulated device's own time per measured step (ms), from the Python events of its trace."""
    try:
        data = json.loads(gzip.open(trace).read())
    except (OSError, ValueError):
        return None
    events = data.get("traceEvents") or []
    warmup = ((data.get("perfaudit") or {}).get("window") or {}).get("warmup", 0)
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    steps = steps[warmup:]
    py = sorted((e for e in events if e.get("cat") == "python_function" and e.get("ph") == "X"),
                key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    own: dict[int, float] = {}
    parent: dict[int, dict] = {}
    stack: list[dict] = []
    for e in py:  # self time: each event less its children's
        while stack and (stack[-1]["tid"] != e["tid"] or stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]):
            stack.pop()
        own[id(e)] = e["dur"]
        if stack:
            own[id(stack[-1])] -= e["dur"]
            parent[id(e)] = stack[-1]
        stack.append(e)
    total = 0.0
    for step in steps:
        start, end = step["ts"], step["ts"] + step["dur"]
        for e in py:
            if not start <= e["ts"] < end:
                continue
            name, up = e["name"], parent.get(id(e))
            mine = "perfaudit/collect/emulation/" in name
            called = (up is not None and "perfaudit/collect/emulation/" in up["name"]
                      and any(b in name for b in _BOOKKEEPING))
            if mine or called:
                total += own[id(e)]
    return total / len(steps) / 1000.0 if steps else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("scripts", nargs="*", default=SCRIPTS)
    opts = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {opts.rounds} round(s), alternating")
    print(f"{'script':<26} {'wall plain':>10} {'emulated':>9} {'ratio':>6}   {'step plain':>10} {'emulated':>9} "
          f"{'ratio':>6}   {'unprofiled ratio':>16}   {'trace ratio':>11}   {'interception':>12}")
    walls, steps, owns, unprofiled = [], [], [], []
    for script in opts.scripts:
        runs = {"cpu": [], "emulate-cuda": []}
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(opts.rounds):
                for device in (("cpu", "emulate-cuda") if r % 2 == 0 else ("emulate-cuda", "cpu")):
                    out = Path(tmp) / f"{device}-{r}"
                    out.mkdir()
                    runs[device].append(one_run(str(ROOT / script), device, out))
        plain, emu = runs["cpu"], runs["emulate-cuda"]
        if any(x["rc"] != 0 or x["step_ms"] is None for x in plain + emu):
            print(f"{Path(script).name:<26} failed: {[x['rc'] for x in plain + emu]}")
            continue
        med = lambda rows, key: statistics.median(x[key] for x in rows)  # noqa: E731
        wall_ratio = med(emu, "wall_s") / med(plain, "wall_s")
        walls.append(wall_ratio)
        own = statistics.median(x["own_ms"] or 0.0 for x in emu)
        owns.append(own / med(emu, "step_ms"))
        steps.append(med(emu, "step_ms") / med(plain, "step_ms"))
        timed = all(x["plain_ms"] for x in plain + emu)
        if timed:
            unprofiled.append(med(emu, "plain_ms") / med(plain, "plain_ms"))
        print(f"{Path(script).name:<26} {med(plain, 'wall_s'):>9.2f}s {med(emu, 'wall_s'):>8.2f}s {wall_ratio:>6.2f}   "
              f"{med(plain, 'step_ms'):>8.2f}ms {med(emu, 'step_ms'):>7.2f}ms "
              f"{med(emu, 'step_ms') / med(plain, 'step_ms'):>6.2f}   "
              f"{unprofiled[-1] if timed else float('nan'):>16.2f}   "
              f"{med(emu, 'trace_kb') / med(plain, 'trace_kb'):>11.2f}   "
              f"{100 * own / med(emu, 'step_ms'):>10.0f} %")
    if walls:
        print(f"wall time, emulated / plain: median {statistics.median(walls):.2f}, worst {max(walls):.2f} "
              f"(goal: at most 1.3)")
        print(f"measured step, emulated / plain: median {statistics.median(steps):.2f}, worst {max(steps):.2f} "
              f"(goal: at most 1.3 on each script)")
        if unprofiled:
            print(f"unprofiled step (timed after the window), emulated / plain: median "
                  f"{statistics.median(unprofiled):.2f}, worst {max(unprofiled):.2f} (the interception without the "
                  "profiler, and the CUDA branch's own work)")
        print(f"the interception's own share of the emulated step: median {100 * statistics.median(owns):.0f} %, "
              f"worst {100 * max(owns):.0f} % (the rest of a ratio above 1 is the CUDA branch's own work)")


if __name__ == "__main__":
    main()
