"""`torchrun … -m perfaudit.launch [OPTIONS] train.py ARGS`: the form for job scripts (SLURM, a
cluster launcher) that already call torchrun. Every rank runs the script under perfaudit's bootstrap
(the same probes and window as `perfaudit run`) and writes rank<R>.* files in one run folder; rank 0
then waits for the other ranks' files, analyses every rank's trace and prints the job's report (also
written as report.json and report.html in the run folder).

One changed line in a job script: `torchrun --nproc-per-node 8 train.py` becomes
`torchrun --nproc-per-node 8 -m perfaudit.launch train.py`. The run folder must be on a file system
every node sees (the default is .perfaudit/runs/torchrun-<job id> in the working directory).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

RANK_WAIT_S = 120  # how long rank 0 waits for the other ranks' records after its own window
ANALYSIS_WAIT_S = 60  # then for their own analyses (a rank without one is parsed by rank 0)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m perfaudit.launch",
                                     description="Run under torchrun: audit every rank, one report for the job.")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out-dir", default=None, help="run folder shared by every rank")
    parser.add_argument("--no-stack", action="store_true", help="do not record Python stacks")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    opts = _parse(sys.argv[1:] if argv is None else argv)
    args = opts.args
    if args[:1] == ["--"]:
        args = args[1:]
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    job = os.environ.get("TORCHELASTIC_RUN_ID") or "job"
    run_dir = os.path.abspath(opts.out_dir or os.path.join(".perfaudit", "runs", f"torchrun-{job}"))
    os.makedirs(run_dir, exist_ok=True)
    config = {"run_dir": run_dir, "warmup": opts.warmup, "steps": opts.steps, "full": False,
              "with_stack": not opts.no_stack, "record_shapes": True, "record_budget_s": 30.0,
              "trace_budget_mb": 200.0, "path_aliases": {}, "mode": "profile", "seed": None, "patched": {},
              "run_as": None, "job_report": {"world_size": world, "rank": rank},
              "source_roots": [os.path.dirname(os.path.abspath(opts.script)), os.getcwd()]}
    os.environ["PERFAUDIT_CONFIG"] = json.dumps(config)
    sys.argv = [sys.argv[0], opts.script, *args]
    from .collect.bootstrap import main as bootstrap
    bootstrap()


def job_report(run_dir: str, world_size: int) -> None:
    """Rank 0, after its own window: wait for every rank's record, then report on the job."""
    deadline = time.monotonic() + RANK_WAIT_S
    expected = [os.path.join(run_dir, f"rank{r}.result.json") for r in range(world_size)]
    while time.monotonic() < deadline and not all(os.path.exists(p) for p in expected):
        time.sleep(0.2)
    # each rank analyses its own trace after writing its record: give that a moment to finish
    traces = [p for p in (os.path.join(run_dir, f"rank{r}.trace.json.gz") for r in range(world_size))
              if os.path.exists(p)]
    from .jobs import analysis_path
    deadline = time.monotonic() + ANALYSIS_WAIT_S
    while time.monotonic() < deadline and not all(os.path.exists(analysis_path(t)) for t in traces):
        time.sleep(0.2)
    from . import api, gate
    from .report import console, html, json_report
    rules = api.load_rules()
    try:
        report = api.Report([], [], [])
        roots = (os.getcwd(),)
        api._combine(report, api.job_results(traces, rules, roots, report.notes), rules, roots)
        report = gate.finalize(report, gate.GateOptions(), rules=rules)
    except Exception as exc:  # noqa: BLE001 - the job must end; say why there is no report
        print(f"perfaudit: no job report: {exc}", file=sys.stderr)
        return
    missing = [r for r, p in enumerate(expected) if not os.path.exists(p)]
    if missing:
        report.notes.append(f"rank(s) {', '.join(map(str, missing))} left no record within {RANK_WAIT_S} s "
                            "(crashed, or the run folder is not shared between nodes)")
    report.run_dir = run_dir
    with open(os.path.join(run_dir, "report.json"), "w", encoding="utf-8") as f:
        f.write(json_report.render(report))
    with open(os.path.join(run_dir, "report.html"), "w", encoding="utf-8") as f:
        f.write(html.render(report, rules))
    from rich.console import Console
    console.render(report, Console(file=sys.stdout))


if __name__ == "__main__":
    main()
