"""`torchrun … -m perfaudit.launch [OPTIONS] train.py ARGS`: the form for job scripts (SLURM, a
cluster launcher) that already call torchrun. Every rank runs the script under perfaudit.child
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

from .collect.run.rundir import prepare_job_run_dir


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
    prepare_job_run_dir(run_dir, rank)
    config = {"run_dir": run_dir, "warmup": opts.warmup, "steps": opts.steps, "full": False,
              "with_stack": not opts.no_stack, "record_shapes": True, "record_budget_s": 30.0,
              "trace_budget_mb": 200.0, "path_aliases": {}, "mode": "profile", "seed": None, "patched": {},
              "run_as": None, "job_report": {"world_size": world, "rank": rank},
              "source_roots": [os.path.dirname(os.path.abspath(opts.script)), os.getcwd()]}
    os.environ["PERFAUDIT_CONFIG"] = json.dumps(config)
    sys.argv = [sys.argv[0], opts.script, *args]
    from .child import main as child
    child()




if __name__ == "__main__":
    main()
