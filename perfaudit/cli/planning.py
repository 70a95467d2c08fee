"""`perfaudit plan`: the largest batch that fits the GPU, found by running it (verify/batch_plan.py)."""
from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from .. import api
from ..errors import EXIT_FINDINGS, EXIT_OK
from ..report import outputs
from .common import ArgsArg, ConfigOpt, DebugOpt, QuietOpt, ScriptArg, TargetOpt, app, handles_errors, out, progress, status
from .running import DeviceOpt


@app.command()
@handles_errors
def plan(
    script: ScriptArg,
    args: ArgsArg = None,
    target: TargetOpt = None,
    device: DeviceOpt = None,
    timeout: Annotated[float, typer.Option(min=0, help="Stop any one run after this many seconds (0: never).")] = 600.0,
    out_dir: Annotated[Optional[str], typer.Option(
        help="Folder for the runs (a batch-xN folder each; default ./.perfaudit/runs/<timestamp>).")] = None,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Write the plan as JSON to FILE.")] = None,
    checkpoint: Annotated[bool, typer.Option(
        "--checkpoint", help="Plan activation checkpointing instead (tip T14): run the script with each of its "
                             "repeated blocks checkpointed and offer the one that frees the most memory.")] = False,
    memory_budget: Annotated[Optional[float], typer.Option(
        "--memory-budget", min=0.001, help="GB a step may reserve (a GPU shared with another job, a smaller card); "
                                           "default: the target's memory less its CUDA context and 10 %.")] = None,
    config: ConfigOpt = None, quiet: QuietOpt = False, debug: DebugOpt = False,
):
    """Find the largest batch that fits the GPU with a 10 % margin (tip T12): run SCRIPT at its batch and at
    twice it for the memory a sample adds, then at the largest batch that fits, and offer it only if that run
    fit. Every DataLoader's batch_size is scaled; on a CPU-only machine the CUDA path runs on the emulated
    device and the batch run is also bounded by this machine's memory. With --checkpoint, plan activation
    checkpointing of the script's repeated blocks instead (tip T14): when the step does not fit, only as many
    blocks as it takes. Exits 0 with a plan, 1 without."""
    from ..report.plan_report import checkpoint_dict, render_checkpoint_console, render_console, render_json
    outputs.check_writable([output] if output else [], protected=(script,))
    settings = api.prepare(config, None, None, None)
    api.check_script(script)
    options = api.run_options(settings, timeout=timeout, out_dir=out_dir, device=device, target=target)
    options.record_shapes = options.target != "none"  # each batch's step projected: its samples per second
    budget = api.checked_budget(memory_budget)
    if checkpoint:
        with status(f"planning checkpointing for {script} …", quiet) as line:
            result = api.plan_checkpoint(script, args or [], options, progress(line, script), budget)
        render_checkpoint_console(result, out)
        if output:
            outputs.write_text(output, json.dumps(checkpoint_dict(result), indent=2))
    else:
        with status(f"planning the batch of {script} …", quiet) as line:
            result = api.plan_batch(script, args or [], options, progress(line, script), budget)
        render_console(result, out)
        if output:
            outputs.write_text(output, render_json(result))
    if result.interrupted:
        raise typer.Exit(128 + result.interrupted)
    raise typer.Exit(EXIT_OK if result.offered is not None else EXIT_FINDINGS)
