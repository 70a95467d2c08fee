"""perfaudit's own cost on the host, measured and taken out: does a profiled step, less what the run's
calibration says perfaudit added, give the step the script takes without perfaudit?

    python benchmarks/bench_host_overhead.py [--device cpu|emulate-cuda] [SCRIPT ...]

For each script, alternately: `perfaudit run` (the profiled window, stacks on) and a run without the profiler
(verify's timing child, same window). Prints the profiled step, the step less perfaudit's cost (the
calibration's µs per recorded Python call and per recorded op, the device mode's and perfaudit's own frames'
timed cost: over every event of each step, or over what the projection subtracts from the host's time: the
Python calls and outermost ops between ops and every event of a fetch), the plain step (verify's timing child)
and the same run's steps timed after its window without the profiler (`same run`: on the emulated path these
still carry the device mode's own cost). On `--device cpu` they are comparable (the same CPU compute in each);
the goal: within 10 %.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from perfaudit.api import RunOptions
from perfaudit.collect.run.runner import run_script
from perfaudit.projection.host.overhead import OwnCost, event_costs
from perfaudit.projection.timeline import _Index, _outside
from perfaudit.trace.parser import load_trace

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["tests/realistic/cnn_classifier.py", "tests/realistic/char_transformer.py",
           "tests/realistic/trainer_next_iter.py", "tests/realistic/lstm_lm.py", "tests/realistic/gan.py",
           "tests/realistic/cuda_path_trainer.py"]


def profiled(script: str, device: str, out: str) -> tuple[float, float, float, float]:
    result = run_script(str(ROOT / script), [], RunOptions(warmup=2, steps=5, out_dir=out, device=device,
                                                           cwd=str((ROOT / script).parent)))
    trace = load_trace(result.trace_path)
    unprofiled = [s["wall_ms"] for s in result.outcome.get("plain_steps") or [] if not s.get("settling")]
    steps = trace.measured_steps
    measured = statistics.median(s.dur for s in steps) / 1e3
    costs = event_costs(trace)
    own = OwnCost(trace, costs) if costs else None
    index = _Index(trace)
    if own is not None:
        own.prepare(steps[0].ts, steps[-1].end, index.data_starts)
    every, outer = [], []
    for s in steps:
        if own is None:
            every.append(0.0)
            outer.append(0.0)
            continue
        fetches = [(max(a, s.ts), min(b, s.end)) for a, b in index.data_ranges(s)]
        counted, timed = own.in_gaps(s, [n.op for n in _outside(index.roots(s), fetches)], fetches)
        outer.append(counted + timed + sum(own.between(a, b) for a, b in fetches))
        every.append(own.between(s.ts, s.end) + timed)
    less_all = statistics.median(s.dur - o for s, o in zip(steps, every)) / 1e3
    less_outer = statistics.median(s.dur - o for s, o in zip(steps, outer)) / 1e3
    return measured, less_all, less_outer, statistics.median(unprofiled) if unprofiled else float("nan")


def plain(script: str, device: str, out: str) -> float:
    result = run_script(str(ROOT / script), [], RunOptions(warmup=2, steps=5, out_dir=out, device=device,
                                                           mode="timing", cwd=str((ROOT / script).parent)))
    return statistics.median(result.timing["step_times_s"]) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("scripts", nargs="*", default=SCRIPTS)
    opts = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs, --device {opts.device}, "
          f"{opts.rounds} round(s) alternating; medians, ms per step")
    print(f"{'script':<28}{'profiled':>9}{'less all':>10}{'less outer':>11}{'plain':>8}{'same run':>9}"
          f"{'all/plain':>10}{'outer/plain':>12}{'outer/same':>11}")
    for script in opts.scripts:
        rows, plains = [], []
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(opts.rounds):
                order = ("p", "t") if r % 2 == 0 else ("t", "p")
                for kind in order:
                    if kind == "p":
                        rows.append(profiled(script, opts.device, f"{tmp}/p{r}"))
                    else:
                        plains.append(plain(script, opts.device, f"{tmp}/t{r}"))
        m, a, o, u = (statistics.median(x[i] for x in rows) for i in range(4))
        p = statistics.median(plains)
        print(f"{Path(script).name:<28}{m:>9.2f}{a:>10.2f}{o:>11.2f}{p:>8.2f}{u:>9.2f}{a / p:>10.2f}{o / p:>12.2f}"
              f"{o / u:>11.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
