"""The commands that run the script: `run`, `fix`, `verify`, `bisect`, `history`."""
from __future__ import annotations

import math
import sys
from typing import Annotated, Optional

import typer

from .. import api
from ..errors import EXIT_FINDINGS, EXIT_INTERNAL, EXIT_OK, EXIT_SCRIPT_FAILED, UsageError
from ..report import outputs
from .common import (
    ArgsArg,
    BaselineOpt,
    BaselineWriteOpt,
    ConfigOpt,
    DebugOpt,
    FailOnOpt,
    FormatOpt,
    IgnoreOpt,
    OutputOpt,
    QuietOpt,
    Reporting,
    RulesDirOpt,
    ScriptArg,
    SelectOpt,
    TargetOpt,
    VerboseOpt,
    app,
    command_line,
    emit,
    err,
    exit_code_of_run,
    handles_errors,
    out,
    progress,
    status,
    stdout_gone,
)

WarmupOpt = Annotated[Optional[int], typer.Option(min=0, help="Steps to run before recording (default 2).")]
StepsOpt = Annotated[Optional[int], typer.Option(min=1, help="Steps to record (default 5).")]
OutDirOpt = Annotated[Optional[str], typer.Option(
    help="Run folder (default ./.perfaudit/runs/<timestamp>, of which the newest 10 are kept); a folder named here "
         "is never pruned: name the runs you keep for `perfaudit diff`.")]
MaxTraceOpt = Annotated[Optional[float], typer.Option(
    "--max-trace-mb", min=1, help="Uncompressed trace the window may write (default 200 MB); beyond it fewer steps, "
                            "and below 3 steps stacks on the first measured step only.")]
DeviceOpt = Annotated[Optional[str], typer.Option(
    "--device", help="Where the script runs when this machine has no GPU (with a GPU it runs there, nothing "
                     "emulated). auto (default): a script with a CUDA path (cuda, .cuda(), torch.accelerator, "
                     "Lightning/Transformers/Accelerate) sees one emulated CUDA device served by the CPU, and "
                     "what its GPU branch does is recorded (copies, syncs, autocast, optimizer choice; costs "
                     "estimated); if it still trains on its CPU branch (an opt-in --cuda), the report is the CPU "
                     "branch's and names the switch. A script without a CUDA path runs as here. cpu: never "
                     "emulate. emulate-cuda: always offer the emulated device.")]
KeepStacksOpt = Annotated[bool, typer.Option(
    "--keep-stacks", help="Never drop Python stacks to fit the trace budget (only steps are cut).")]


@app.command()
@handles_errors
def run(
    script: ScriptArg,
    args: ArgsArg = None,
    warmup: WarmupOpt = None,
    steps: StepsOpt = None,
    full: Annotated[bool, typer.Option("--full", help="Let the script run to its end after the window.")] = False,
    timeout: Annotated[float, typer.Option(min=0, help="Stop the script after this many seconds (0: never).")] = 600.0,
    out_dir: OutDirOpt = None,
    stack: Annotated[bool, typer.Option("--stack/--no-stack", help="Record Python stacks (needed for file:line).")] = True,
    max_trace_mb: MaxTraceOpt = None,
    keep_stacks: KeepStacksOpt = False,
    device: DeviceOpt = None,
    target: TargetOpt = None,
    allow_no_training: Annotated[bool, typer.Option(
        "--allow-no-training", help="Let the gate pass a run that never reached a training step.")] = False,
    nproc_per_node: Annotated[Optional[str], typer.Option(
        "--nproc-per-node", help="Run under torchrun with this many processes per node (one report for the job).",
        rich_help_panel="torchrun")] = None,
    nnodes: Annotated[Optional[str], typer.Option(help="torchrun --nnodes.", rich_help_panel="torchrun")] = None,
    node_rank: Annotated[Optional[int], typer.Option(help="torchrun --node-rank.", rich_help_panel="torchrun")] = None,
    rdzv_endpoint: Annotated[Optional[str], typer.Option(help="torchrun --rdzv-endpoint.", rich_help_panel="torchrun")] = None,
    rdzv_backend: Annotated[Optional[str], typer.Option(help="torchrun --rdzv-backend.", rich_help_panel="torchrun")] = None,
    rdzv_id: Annotated[Optional[str], typer.Option(help="torchrun --rdzv-id.", rich_help_panel="torchrun")] = None,
    master_addr: Annotated[Optional[str], typer.Option(help="torchrun --master-addr.", rich_help_panel="torchrun")] = None,
    master_port: Annotated[Optional[int], typer.Option(help="torchrun --master-port.", rich_help_panel="torchrun")] = None,
    fmt: FormatOpt = None, output: OutputOpt = None, fail_on: FailOnOpt = None, config: ConfigOpt = None,
    select: SelectOpt = None, ignore: IgnoreOpt = None, baseline: BaselineOpt = None,
    baseline_write: BaselineWriteOpt = None, rules_dir: RulesDirOpt = None, verbose: VerboseOpt = False,
    quiet: QuietOpt = False, debug: DebugOpt = False,
):
    """Run SCRIPT for a bounded profiler window and report ranked fixes."""
    reporting = Reporting(config, rules_dir, select, ignore, fmt, output, baseline, baseline_write, protected=(script,))
    settings = reporting.settings
    settings.config.allow_no_training = settings.config.allow_no_training or allow_no_training
    options = api.run_options(settings, warmup, steps, full, timeout, out_dir, stack,
                              trace_budget_mb=max_trace_mb, keep_stacks=keep_stacks or None, device=device,
                              target=target)
    launch = {"--nproc-per-node": nproc_per_node, "--nnodes": nnodes, "--node-rank": node_rank,
              "--rdzv-endpoint": rdzv_endpoint, "--rdzv-backend": rdzv_backend, "--rdzv-id": rdzv_id,
              "--master-addr": master_addr, "--master-port": master_port}
    if any(v is not None for v in launch.values()):  # torchrun's own options, passed through
        options.launch = [item for key, value in launch.items() if value is not None for item in (key, str(value))]
    with status(f"running {script} …", quiet) as line:
        report = api.audit(script, args or [], options, settings.rules, progress(line, script), settings.gate,
                           command_line())
    reporting.finish(report, fail_on, verbose, exit_code_of_run(report), needs_training=True)


@app.command()
@handles_errors
def fix(
    script: ScriptArg,
    args: ArgsArg = None,
    write: Annotated[bool, typer.Option("--write", help="Apply the edits (default: print them as a diff).")] = False,
    source: Annotated[Optional[str], typer.Option(
        "--from", help="Fix what an earlier run found: its run folder, trace or JSON report (no new run).")] = None,
    warmup: WarmupOpt = None, steps: StepsOpt = None, out_dir: OutDirOpt = None,
    config: ConfigOpt = None, select: SelectOpt = None, ignore: IgnoreOpt = None, rules_dir: RulesDirOpt = None,
    quiet: QuietOpt = False, debug: DebugOpt = False,
):
    """Turn the findings with a mechanical fix into edits of your source: a diff, or --write."""
    from ..report.fix_console import render_plan  # libcst: only for fix
    settings = api.prepare(config, rules_dir, select, ignore)
    api.check_fixable(script, source, write)
    options = api.run_options(settings, warmup, steps, out_dir=out_dir)
    with status(f"running {script} …", quiet) as line:
        report, fixes = api.fix(script, args or [], options, settings.rules, {r.id for r in settings.rules}, source,
                                progress(line, script))
    try:
        diff = fixes.diff()
        if diff and not write:
            sys.stdout.write(diff)
            sys.stdout.flush()
    except BrokenPipeError:
        stdout_gone()
    written = fixes.write() if write else []
    render_plan(report, fixes, written, err)
    # as `ruff --diff`: a diff with changes to make exits 1, so that CI can ask "anything to fix?"
    raise typer.Exit(EXIT_FINDINGS if fixes.files and not write else EXIT_OK)


@app.command()
@handles_errors
def verify(
    script: ScriptArg,
    args: ArgsArg = None,
    each: Annotated[bool, typer.Option("--each", help="Measure every fix on its own (one B per rule).")] = False,
    rounds: Annotated[int, typer.Option(min=1, help="Interleaved A/B rounds at least (each a fresh process).")] = 3,
    max_rounds: Annotated[int, typer.Option(min=1, help="Rounds at most, while the verdict is still open.")] = 12,
    max_time: Annotated[float, typer.Option(
        min=0, help="Seconds verify may spend on rounds beyond --rounds (0: no rounds beyond them).")] = 120.0,
    tolerance: Annotated[float, typer.Option(
        min=0, help="A change whose interval lies within ±this % of the step is 'no change' (stops the rounds).")] = 2.0,
    end_check: Annotated[float, typer.Option(
        min=0, help="Then run the fixed script past its window for up to this many seconds, to see the edited code "
                    "and the later uses of what it assigns run (0: do not).")] = 60.0,
    warmup: Annotated[int, typer.Option(min=0, help="Steps each A/B run takes before measuring.")] = 3,
    steps: Annotated[int, typer.Option(min=1, help="Steps each A/B run measures.")] = 15,
    seed: Annotated[int, typer.Option(help="Seed for random, torch and numpy, the same in A and B.")] = 0,
    source: Annotated[Optional[str], typer.Option(
        "--from", help="Verify what an earlier run found: its run folder, trace or JSON report.")] = None,
    plan_file: Annotated[Optional[str], typer.Option(
        "--plan", help="Verify a plan of `perfaudit plan -o FILE` instead of the fixes: step time (per sample for a "
                       "batch), loss and the step's peak device memory against the prediction.")] = None,
    timeout: Annotated[float, typer.Option(min=0, help="Stop any one run after this many seconds (0: never).")] = 600.0,
    out_dir: Annotated[Optional[str], typer.Option(help="Verify folder (default ./.perfaudit/runs/<timestamp>).")] = None,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Write the A/B result as JSON to FILE.")] = None,
    fmt: Annotated[Optional[list[str]], typer.Option(
        "--format", "-f", help="Also the audit report with the verified figures: console, json, sarif, markdown, "
                               "… optionally with a file (-f json=report.json).")] = None,
    config: ConfigOpt = None, select: SelectOpt = None, ignore: IgnoreOpt = None, rules_dir: RulesDirOpt = None,
    quiet: QuietOpt = False, debug: DebugOpt = False,
):
    """Prove the fixes: A/B runs of the script as it is and fixed, step time and loss compared.

    Your files are never written. Rounds go on until the step-time interval excludes zero or lies within
    the tolerance, or the time runs out; exits 1 when a fix breaks the script or changes the loss."""
    from ..report.verify_report import render_console, render_json
    if plan_file is not None:
        from .plan_verification import verify_plan
        if source or each or fmt:
            raise UsageError("--plan: verifies the plan alone (not with --from, --each or --format)")
        verify_plan(script, args or [], plan_file, output, config, timeout, out_dir, warmup, steps, seed,
                    (rounds, max_rounds, max_time, tolerance), quiet)
    specs = outputs.parse_formats(fmt, None) if fmt else []
    outputs.check_writable([p for _, p in specs if p] + ([output] if output else []),
                           protected=(script, *((source,) if source else ())))
    settings = api.prepare(config, rules_dir, select, ignore)
    api.check_script(script)
    audit_options = api.run_options(settings, timeout=timeout)
    timing_options = api.run_options(settings, warmup, steps, timeout=timeout, out_dir=out_dir, for_rules=False)
    timing_options.seed = seed
    plan_rounds = api.Rounds(min=rounds, max=max(max_rounds, rounds), max_time_s=max_time, tolerance_pct=tolerance)
    with status(f"verifying {script} …", quiet) as line:
        report, plan, result = api.verify(script, args or [], audit_options, timing_options, plan_rounds,
                                          settings.rules, {r.id for r in settings.rules}, source, each,
                                          lambda text: line.update(f"verifying {script}: {text}"), end_check)
    render_console(result, plan, out)
    if output:
        outputs.write_text(output, render_json(result))
    if any(path is None for _, path in specs):  # a format to standard output (after the A/B figures)
        out.print()
        emit(report, specs, settings.all_rules)
    elif specs:
        failed = outputs.write_files(report, specs, settings.all_rules)
        if failed:
            err.print("perfaudit: " + "; ".join(failed), markup=False)
    if result.interrupted:
        raise typer.Exit(128 + result.interrupted)
    if result.baseline_failure:
        raise typer.Exit(EXIT_SCRIPT_FAILED)
    if report.internal_errors:
        raise typer.Exit(EXIT_INTERNAL)
    raise typer.Exit(EXIT_OK if result.passed else EXIT_FINDINGS)


@app.command()
@handles_errors
def bisect(
    script: ScriptArg,
    args: ArgsArg = None,
    good: Annotated[str, typer.Option("--good", help="A commit (or any git ref) whose step time is good.")] = ...,  # type: ignore[assignment]  # typer: required
    bad: Annotated[str, typer.Option("--bad", help="A later commit whose step time is worse.")] = "HEAD",
    threshold: Annotated[float, typer.Option(
        min=0, help="A commit is bad when its step time is worse than the good one's by more than this % (or "
                    "than a quarter of the regression at --bad, when larger).")] = 5.0,
    exact_threshold: Annotated[bool, typer.Option(
        "--exact-threshold", help="Judge every commit against --threshold itself, not a share of the regression.")] = False,
    rounds: Annotated[int, typer.Option(
        min=1, help="Interleaved A/B rounds at least per comparison (fewer than 3 cannot see how runs differ).")] = 3,
    max_rounds: Annotated[int, typer.Option(min=1, help="Rounds at most, while a comparison is open.")] = 8,
    max_time: Annotated[float, typer.Option(
        min=0, help="Seconds a comparison may spend on rounds beyond --rounds.")] = 120.0,
    warmup: Annotated[int, typer.Option(min=0, help="Steps each timed run takes before measuring.")] = 3,
    steps: Annotated[int, typer.Option(min=1, help="Steps each timed run measures at least.")] = 10,
    min_time: Annotated[float, typer.Option(
        min=0, help="Seconds of steps each timed run measures at least (more steps when they are short).")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed for random, torch and numpy, the same in every run.")] = 0,
    timeout: Annotated[float, typer.Option(min=0, help="Stop any one run after this many seconds (0: never).")] = 600.0,
    out_dir: Annotated[Optional[str], typer.Option(help="Bisect folder (default ./.perfaudit/runs/<timestamp>).")] = None,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Write the result as JSON to FILE.")] = None,
    config: ConfigOpt = None, rules_dir: RulesDirOpt = None, quiet: QuietOpt = False, debug: DebugOpt = False,
):
    """Find the first commit that made training slower, in temporary git worktrees (your working tree is
    never touched), timing each against --good with verify's interleaved A/B rounds; then audit it against
    its parent and show the findings it introduced."""
    from ..report.bisect_report import render_console, render_json
    outputs.check_writable([output] if output else [], protected=(script,))
    settings = api.prepare(config, rules_dir, None, None)
    api.check_script(script)
    audit_options = api.run_options(settings, timeout=timeout)
    timing_options = api.run_options(settings, warmup, steps, timeout=timeout, out_dir=out_dir, for_rules=False)
    timing_options.seed, timing_options.min_measure_s = seed, min_time
    plan = api.Rounds(min=rounds, max=max(max_rounds, rounds), max_time_s=max_time)
    with status(f"bisecting {script} …", quiet) as line:
        result = api.bisect(script, args or [], good, bad, timing_options, plan, threshold, audit_options,
                            exact_threshold, lambda text: line.update(f"bisecting {script}: {text}"))
    render_console(result, out)
    if output:
        outputs.write_text(output, render_json(result))
    if result.interrupted:
        raise typer.Exit(128 + result.interrupted)
    raise typer.Exit(EXIT_OK if result.culprit or result.conclusion.startswith("no regression") else EXIT_FINDINGS)


def _percent(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.strip().rstrip("%").strip())
    except ValueError:
        raise typer.BadParameter(f"expected a percentage such as 10% or 10, not '{text}'") from None
    if not math.isfinite(value) or value < 0:
        raise typer.BadParameter(f"expected a percentage of at least 0, not '{text}'")
    return value


@app.command()
@handles_errors
def history(
    target: Annotated[str, typer.Argument(help="The script to audit now, or a run folder or trace already recorded.")],
    args: ArgsArg = None,
    file: Annotated[Optional[str], typer.Option(
        "--file", help="The history (JSON Lines; default perfaudit-history.jsonl at the top of the git repository).")] = None,
    window: Annotated[int, typer.Option(min=1, help="Compare with this many earlier entries at most.")] = 20,
    fail_on_slowdown: Annotated[Optional[str], typer.Option(
        "--fail-on-slowdown", help="Exit 1 when the step time is slower than the recent median beyond the noise "
                                   "and by more than this (10%).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Judge the entry but do not append it.")] = False,
    warmup: WarmupOpt = None,
    steps: StepsOpt = None,
    timeout: Annotated[float, typer.Option(min=0, help="Stop the script after this many seconds (0: never).")] = 600.0,
    out_dir: OutDirOpt = None,
    device: DeviceOpt = None,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Write the judgement as JSON to FILE.")] = None,
    config: ConfigOpt = None, select: SelectOpt = None, ignore: IgnoreOpt = None, rules_dir: RulesDirOpt = None,
    quiet: QuietOpt = False, debug: DebugOpt = False,
):
    """Record this commit's step time and findings in the project's history (for CI) and compare it with
    the recent entries: slower beyond their noise, where the level shifted, which findings appeared."""
    from ..report.history_report import render_console, render_json
    limit = _percent(fail_on_slowdown)
    outputs.check_writable([p for p in (output, file) if p], protected=(target,))
    settings = api.prepare(config, rules_dir, select, ignore)
    options = api.run_options(settings, warmup, steps, False, timeout, out_dir, device=device)
    with status(f"measuring {target} …", quiet) as line:
        report, judged, path, notes = api.history(target, args or [], options, file, window, limit, not dry_run,
                                                  settings.rules, settings.gate, progress(line, target))
    recorded = not dry_run and judged.stopped_by is None
    render_console(judged, path, recorded, notes, out)
    if output:
        outputs.write_text(output, render_json(judged, path, recorded, notes))
    failed = exit_code_of_run(report)
    if failed is not None:
        raise typer.Exit(failed)
    raise typer.Exit(EXIT_FINDINGS if judged.fails else EXIT_OK)
