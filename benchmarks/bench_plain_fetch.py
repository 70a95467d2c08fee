"""DATA001's wait in the training process against the same fetch without perfaudit: does the wait a report
states match what the script's DataLoader takes when nothing records it?

    python benchmarks/bench_plain_fetch.py [--device cpu|emulate-cuda] [--rounds N] [SCRIPT ...]

For each script (a DataLoader with num_workers=0), alternately: `perfaudit run` (default window), whose report
gives the DataLoader wait it states (data.loader.wait_ms: timed after the window without the profiler, as
result.json holds them) beside
the wait as the profiled steps recorded it (the figure reports gave before); and the script alone, with only a
timer around `DataLoader.__next__` (median of fetches 8 to 20: past the first epoch's start), on as many intra-op
threads as the audited run used (on a busy machine perfaudit fits them to the free cores). Prints each and
their ratios to the plain fetch; the goal: the stated wait within 25 % of the plain one on `--device cpu`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["tests/realistic/dataset_transforms.py", "tests/realistic/device_built_lm.py",
           "tests/realistic/augmented_images.py", "sample_scripts/data_bad.py"]

# the script alone: each DataLoader fetch timed, the median of fetches 8-20 printed, then the process ends
PLAIN = r"""
import json, os, runpy, sys, time
import torch
import torch.utils.data.dataloader as dl
torch.set_num_threads(int(os.environ["PLAIN_THREADS"]))  # as many as the audited run used (a busy machine's fewer)
times, original = [], dl._BaseDataLoaderIter.__next__
def timed(self):
    began = time.perf_counter()
    try:
        return original(self)
    finally:
        times.append(time.perf_counter() - began)
        if len(times) >= 20:
            print(json.dumps(sorted(times[8:20])[len(times[8:20]) // 2] * 1e3), flush=True)
            os._exit(0)
dl._BaseDataLoaderIter.__next__ = timed
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def audited(script: str, device: str, out: Path) -> tuple[float, float, int]:
    """(the wait the report states, the wait as the profiled steps recorded it, ms per step; the intra-op threads
    the run used)."""
    from perfaudit.facts.registry import Context
    from perfaudit.trace.parser import load_trace
    report = out / "r.json"
    subprocess.run([sys.executable, "-m", "perfaudit", "run", str(ROOT / script), "--device", device,
                    "--out-dir", str(out / "run"), "-f", f"json={report}"], cwd=ROOT / Path(script).parent,
                   capture_output=True, check=False)
    trace = load_trace(str(out / "run" / "trace.json.gz"))
    result = json.loads((out / "run" / "result.json").read_text())
    trace.probes["window"]["plain_steps"] = result["plain_steps"]
    ctx = Context(trace=trace)
    from perfaudit.facts.data import _wait_ms
    threads = (result["window"].get("threads") or {}).get("used") or 1
    return ctx.get("data.loader")["wait_ms"], _wait_ms(ctx, ctx.step_ms), threads


def plain(script: str, threads: int) -> float:
    proc = subprocess.run([sys.executable, "-c", PLAIN, str(ROOT / script)], cwd=ROOT / Path(script).parent,
                          capture_output=True, text=True, check=False, env={**os.environ, "PLAIN_THREADS": str(threads)})
    return float(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("scripts", nargs="*", default=SCRIPTS)
    args = parser.parse_args()
    print(f"{'script':34} {'stated':>8} {'recorded':>9} {'plain':>8} {'stated/plain':>13} {'recorded/plain':>15}")
    for script in args.scripts:
        stated, recorded, alone = [], [], []
        for _ in range(args.rounds):  # alternated: a neighbour's load falls on both alike
            with tempfile.TemporaryDirectory() as tmp:
                s, r, threads = audited(script, args.device, Path(tmp))
            stated.append(s)
            recorded.append(r)
            alone.append(plain(script, threads))
        s, r, p = (statistics.median(v) for v in (stated, recorded, alone))
        print(f"{Path(script).name:34} {s:8.2f} {r:9.2f} {p:8.2f} {s / p:13.2f} {r / p:15.2f}")


if __name__ == "__main__":
    main()
