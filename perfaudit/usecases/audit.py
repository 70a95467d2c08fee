"""`run`: audit a script. It runs in a child process for a bounded profiler window (collect/), its
trace is analysed as `analyze` would, what the static pass sees in the script is merged in, and the run
folder gets the report as HTML. Under torchrun every rank analyses its own trace (usecases/jobs.py)."""
from __future__ import annotations

import os
import re
import shutil
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import replace

from ..collect.inprocess.notebook import relocate, write_script
from ..collect.run.emulated_failure import emulation_may_cause
from ..collect.run.runner import RunOptions, RunResult, check_script, run_script, with_cpu_branch
from ..engine.loader import Rule, builtin_rules_dir, load_rules
from ..errors import LaunchError, TraceError, WriteError
from ..facts import Context
from ..facts.emulated import gpu_branch_ran, offered
from ..facts.gpu.projection import emulated_gpu
from ..files import write_atomic
from ..findings import Report
from ..outcome import Outcome
from ..outcome import describe as describe_outcome
from ..policy import gate
from ..policy.gate import GateOptions
from ..static import lint as lint_paths
from ..static.cuda_path import has_cuda_path
from ..static.gpu_switch import gpu_switch
from ..trace import load_trace
from ..trace.gc_pause import collection_paused
from ..trace.run_record import add_late_entries
from .analysis import combine, context_notes, evaluate_rules, reading_notes, summarize
from .jobs import job_results

_NOT_TRAINING = {"dataloader": "DataLoader batches", "inference": "calls of the top-level module under no_grad"}


def audit(script: str, args: list[str], options: RunOptions, rules: list[Rule] | None = None,
          on_progress: Callable[[dict], None] | None = None, gate_options: GateOptions | None = None,
          command: str | None = None, write: bool = True) -> Report:
    """Run a script for a bounded profiler window, evaluate every rule on what was recorded, and
    merge what the static pass sees in the script. The run folder gets the report as HTML."""
    rules = rules if rules is not None else load_rules()
    if script.endswith(".ipynb"):
        return _audit_notebook(script, args, options, rules, on_progress, gate_options, command)
    if options.launch:  # the ranks evaluate the same rules on their own traces
        options.rule_ids = [r.id for r in rules]
        folders = {os.path.dirname(os.path.realpath(r.path)) for r in rules}
        options.rules_dirs = sorted(folders - {os.path.realpath(builtin_rules_dir())})
    if options.device == "auto":  # the child still emulates only where there is no GPU
        options.device = "emulate-cuda" if has_cuda_path(script) else "cpu"
    if options.device == "emulate-cuda" and options.emulated_gpu is None:  # the device the script asks about
        options.emulated_gpu = emulated_gpu(options.target)
    if options.target != "none" and (options.device == "emulate-cuda" or options.target != "auto"):
        options.record_shapes = True  # a CPU run projected onto a GPU: each op's kernels from its shapes
    result = with_cpu_branch(run_script(script, args, options, on_progress), script, args, options, on_progress)
    if options.launch:
        return _audit_job(script, result, rules, gate_options, command, options.target)
    return report_for_run(result, script, options, rules, gate_options, command, write)


def report_for_run(result: RunResult, script: str, options: RunOptions, rules: list[Rule],
                   gate_options: GateOptions | None = None, command: str | None = None,
                   write: bool = True) -> Report:
    """The report on one recorded run (a child's, or a session inside the user's process): its trace
    analysed, the static pass merged, the gate applied, the run folder given report.html and report.json."""
    trace = None
    notes = []
    if result.trace_path:
        try:
            trace = load_trace(result.trace_path, op_shapes=options.target != "none")
        except TraceError as exc:
            notes.append(f"the recorded trace could not be read: {exc}")
    roots = (os.path.dirname(result.script), os.getcwd())
    probes = None if trace is not None else result.probes
    if trace is not None:
        add_late_entries(trace, result.outcome)  # the FLOPs and plain steps, worked out after the trace was written
    ctx = Context(trace, probes, roots, target=options.target)
    with collection_paused():
        findings, skipped = evaluate_rules(ctx, [r for r in rules if r.scope == "trace"])
        summaries = [summarize(trace, ctx)] if trace is not None else []
    report = Report(findings, skipped, summaries, script=result.script,
                    outcome=result.outcome, run_dir=result.run_dir,
                    notes=notes + context_notes(ctx) + (reading_notes(trace.path, trace) if trace else []),
                    stop_signal=result.stop_signal, command=command,
                    internal_errors=list(result.outcome.get("internal_errors") or []), source_roots=list(roots))
    report.notes.extend(run_notes(result, options, trace))
    if os.path.isfile(script):  # an interactive session's steps have no script to read
        gate.merge_static(report, lint_paths([script], rules))
    report = gate.finalize(report, gate_options or GateOptions(), extra_files=(script,), rules=rules)
    if not write:
        return report
    write_run_reports(report, rules)
    return report


def _audit_notebook(notebook: str, args: list[str], options: RunOptions, rules: list[Rule],
                    on_progress, gate_options: GateOptions | None, command: str | None) -> Report:
    """A notebook: its code cells run in order as one script (collect/inprocess/notebook.py) from the notebook's
    folder, as its kernel would; the findings then point at the cells, and the script is kept in the
    run folder (notebook.py)."""
    check_script(notebook)  # a syntax error named by cell and line, before anything runs
    folder = tempfile.mkdtemp(prefix="perfaudit-nb-")
    try:
        converted = write_script(notebook, folder)
        home = os.path.dirname(converted.notebook)
        options = replace(options, cwd=options.cwd or home, import_dir=home)
        report = audit(converted.path, args, options, rules, on_progress, gate_options, command, write=False)
        report.findings = relocate(report.findings, converted)
        report.script = converted.notebook
        report.source_roots = [home, *report.source_roots]
        report.notes.append("a notebook: its code cells ran in order as one script, without a kernel (line "
                            "magics and shell escapes skipped); the script is notebook.py in the run folder")
        report.notes.extend(converted.skipped)
        if report.run_dir and os.path.isdir(report.run_dir):
            shutil.copyfile(converted.path, os.path.join(report.run_dir, "notebook.py"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    write_run_reports(report, rules)
    return report


def run_notes(result: RunResult, options: RunOptions, trace) -> list[str]:
    """What the report must say about how the run went: no trace, not training, a shortened window."""
    notes = []
    outcome = result.outcome
    if trace is None:
        notes.append(_no_trace_reason(result))
    elif outcome.get("step_source") in _NOT_TRAINING:
        notes.append(f"no optimizer step or backward() was seen: the steps are "
                     f"{_NOT_TRAINING[outcome['step_source']]} (inference or evaluation)")
    step_note = _what_a_step_is(outcome, trace)
    if step_note:
        notes.append(step_note)
    trimmed = outcome.get("trimmed") or {}
    if "steps" in trimmed or "stacks" in trimmed:
        notes.append(
            f"a step writes about {trimmed.get('estimated_mb_per_step', 0):g} MB of trace, so to stay within the "
            f"{options.trace_budget_mb:g} MB trace budget {trimmed.get('steps', options.steps)} step(s) were measured "
            f"after {trimmed.get('warmup', options.warmup)} warm-up (--max-trace-mb raises it)")
    if trimmed.get("stacks") == "off":
        notes.append("even one step with Python stacks would exceed the trace budget, so the window was recorded "
                     "WITHOUT stacks: findings have no file:line; --max-trace-mb MB or --keep-stacks records them")
    refused = trimmed.get("stacks_refused")
    if isinstance(refused, list) and refused:
        names = ", ".join(f"`{name}`" for name in refused if isinstance(name, str))
        notes.append(f"the window was recorded WITHOUT Python stacks: the trace budget recorded the warm-up without "
                     f"them, and the script's own profiler range {names} stayed open at every step boundary, where "
                     "they were to come on (a profiler stopped inside a range crashes torch): findings have no "
                     "file:line from the trace; a larger --max-trace-mb keeps them on from the start")
    if trimmed.get("cut_at_step") is not None:
        notes.append(f"the window was closed after step {trimmed['cut_at_step']}: its steps wrote more trace than "
                     f"the sized step promised, and the trace budget ({options.trace_budget_mb:g} MB) would have "
                     "been exceeded")
    if outcome.get("budget_hit"):
        notes.append(f"recording stopped at its time budget ({options.record_budget_s:g} s of this run's own time) "
                     f"after {len(trace.measured_steps) if trace else 0} measured step(s); --steps sets fewer")
    probes = (trace.probes.get("probes") if trace is not None else None) or {}
    if isinstance(probes, dict) and offered(probes) and not gpu_branch_ran(probes):
        switch = gpu_switch(result.script) if result.script and os.path.isfile(result.script) else None
        notes.append("a CUDA device was offered (emulated), but the script trained on its CPU branch: nothing it "
                     "trained was put on the device, so this is the CPU branch's report. To audit its GPU branch, "
                     + (f"run it {switch}" if switch else "run it the way that selects CUDA (the flag, config value "
                        "or environment variable that chooses its device)"))
    for spawned in (probes.get("spawned_inline") or [])[:1] if isinstance(probes, dict) else []:
        site = spawned.get("site") if isinstance(spawned, dict) else None
        where = f" at {os.path.basename(site['path'])}:{site['line']}" if isinstance(site, dict) else ""
        notes.append(f"{spawned.get('api')}{where} starts one process: its function ran in perfaudit's process as "
                     "rank 0, as that process would have run it (with more processes, perfaudit stops at the spawn: "
                     "launch one rank with torchrun)")
    seen = probes or (result.probes if isinstance(result.probes, dict) else {})
    environment = seen.get("environment") if isinstance(seen, dict) else None
    # a real GPU's run says False (a run folder from before the flag says nothing: taken as emulated)
    emulated = not isinstance(environment, dict) or environment.get("emulated_cuda") is not False
    if (options.device == "emulate-cuda" and emulated and not result.emulation_failed
            and outcome.get("outcome") == Outcome.RAISED and emulation_may_cause(outcome)):
        site = outcome.get("site") or {}
        where = f" at {os.path.basename(site['path'])}:{site['line']}" if site.get("path") else ""
        if (outcome.get("steps_recorded") or 0) > (outcome.get("warmup") or 0):
            notes.append(f"the script raised {outcome.get('exception')}{where} on the emulated CUDA device, after its "
                         "window: a call there that the emulation serves differently from a GPU may be the cause, not "
                         "the script (the measured window is reported; `--device cpu` runs the script as it runs here)")
        else:  # run again on its CPU path, it failed there the same way
            notes.append(f"the script raised {outcome.get('exception')}{where} before its window, on the emulated CUDA "
                         "device and on its CPU path alike: the script's own error, or a CUDA call there that the "
                         "emulated device does not serve (please report it to perfaudit)")
    if (options.device == "cpu" and outcome.get("outcome") == Outcome.RAISED and not outcome.get("steps_recorded")
            and re.search(r"cuda|nvidia", f"{outcome.get('exception')} {outcome.get('message')}", re.IGNORECASE)):
        site = outcome.get("site") or {}
        where = f" (at {os.path.basename(site['path'])}:{site['line']})" if site.get("path") else ""
        notes.append(f"the script needs a CUDA device{where}, which `--device cpu` does not give it: `--device "
                     "emulate-cuda` runs its CUDA path on an emulated device here (the default does so for a script "
                     "it sees use CUDA)")
    gpu_path = outcome.get("gpu_path")
    if isinstance(gpu_path, dict):
        small = re.search(r"(Half|BFloat16) without overflow", str(gpu_path.get("message")))
        dtype = {"Half": "float16", "BFloat16": "bfloat16"}[small.group(1)] if small else None
        notes.append("on a GPU this script stops where its CUDA path raised (above): fix that before training "
                     "there" + (f"; under CUDA's autocast the tensor is {dtype}, whose range a constant such as -1e9 "
                                "exceeds: fill with torch.finfo(x.dtype).min instead" if dtype else "")
                     + ". The findings are its CPU branch's, run as `--device cpu` runs it")
    if outcome.get("as_on_a_gpu"):
        notes.append("the emulated CUDA device raised this error as a GPU raises it: the script fails the same way "
                     "on a GPU")
    if result.emulation_failed:
        notes.append(f"the emulated CUDA device could not serve this script ({result.emulation_failed}): it was "
                     "run again on the CPU path, and what is reported comes from that run "
                     "(`--device cpu` skips the emulated run)")
    if outcome.get("retried"):
        notes.append(f"{outcome['retried']}, and the recorded window with it: the script was run again")
    if outcome.get("died_counting"):
        notes.append(f"the audited process died ({outcome['died_counting']}) inside torch while counting the model's "
                     "FLOPs after the window; the window was saved, and the FLOPs come from the recorded op shapes")
    if outcome.get("died_after_window"):
        notes.append(f"the audited process died ({outcome['died_after_window']}) in the steps it ran on after its "
                     "window to time them without the profiler; the window was saved (its DataLoader wait is the "
                     "one the profiled steps recorded)")
    if outcome.get("died_exporting"):
        notes.append(f"the audited process died ({outcome['died_exporting']}) while torch stopped its profiler: "
                     "the recorded window was lost (a crash inside torch; script.log has its stack)")
    for error in outcome.get("internal_errors") or []:
        notes.append(f"perfaudit's own error in its {error['part']}: {error['error']} (the run went on without it; "
                     "please report this bug)")
    return notes


def _what_a_step_is(outcome: dict, trace) -> str | None:
    """What one measured step is, when it is not simply one optimizer.step() per iteration: a closure
    step, or optimizers that step at different cadences (a GAN's critic five times per generator step)."""
    probes = (trace.probes.get("probes") if trace is not None else None) or {}
    optimizers = probes.get("optimizers") or []
    classes = [o.get("class") for o in optimizers if isinstance(o, dict)]
    window = (trace.probes.get("window") if trace is not None else None) or outcome.get("window") or {}
    framework = framework_note(window, outcome.get("step_source"))
    if framework:
        return framework
    if outcome.get("step_source") == "closure":
        if "LBFGS" in classes:
            return ("LBFGS steps with a closure and calls it several times per optimizer.step(): one measured "
                    "step is one closure call (a forward and a backward)")
        named = " and ".join(dict.fromkeys(c for c in classes if c)) or "the optimizer"
        return (f"{named} steps with a closure (optimizer.step(closure)): one measured step is one closure step, "
                "its forward and backward run inside the optimizer's step")
    cadence, order = window.get("optimizer_steps"), window.get("optimizer_order")
    cadence = {name: count for name, count in cadence.items() if type(count) is int and count > 0} \
        if isinstance(cadence, dict) else {}  # a trace is the user's file: counts as perfaudit writes them
    if len(cadence) > 1 and len(set(cadence.values())) > 1:
        ranked = sorted(cadence.items(), key=lambda kv: -kv[1])
        (first, most), rest = ranked[0], ranked[1:]
        order = order if isinstance(order, list) else []
        others = "; ".join(_cadence(name, count, most, _gaps(order, first, name)) for name, count in rest)
        return (f"the optimizers step at different cadences: one measured step is one step of {first}; {others} "
                "(figures per step include their share)")
    return None


def _gaps(order: list, main: str, other: str) -> list[int]:
    """The steps of `main` between each two of `other`'s, in the order every optimizer stepped until the
    window closed."""
    gaps, seen, last = [], 0, None
    for label in order:
        if label == main:
            seen += 1
        elif label == other:
            if last is not None:
                gaps.append(seen - last)
            last = seen
    return gaps


def _cadence(name: str, count: int, most: int, gaps: list[int]) -> str:
    """How often an optimizer steps against the most frequent one: from the steps between its own since the
    start (a window of 6 critic steps may hold 2 of a generator that steps every fifth), else as counted in
    the window."""
    if gaps and min(gaps) > 0:
        every = statistics.median_low(gaps)
        return f"{name} steps once every {every} of them" + ("" if min(gaps) == max(gaps) else " (most often)")
    if most % count == 0:
        return f"{name} steps once every {most // count} of them"
    return f"{name} steps {count} times in {most} of them"


def framework_note(window: dict, step_source: str | None) -> str | None:
    """What drove the steps, when a framework did (collect/window/frameworks.py), and what one step is."""
    framework = window.get("framework") if isinstance(window, dict) else None
    if not isinstance(framework, dict) or not framework.get("name"):
        return None
    named = f"{framework['name']} {framework.get('version') or ''}".strip()
    loop = framework.get("loop") or "its loop"
    if step_source in ("lightning", "transformers"):
        return (f"{named} ({loop}) drives the training; the steps are its training batches, marked by "
                "perfaudit's callback (validation steps left out)")
    if step_source == "closure":
        return (f"{named} ({loop}) drives the training: one measured step is one training step; its forward and "
                "backward run inside optimizer.step(closure), and are counted as forward and backward")
    if framework["name"] == "Accelerate":
        return (f"{named}: the script trains through an Accelerator; a measured step is one step of the "
                "optimizer it wraps")
    return f"{named} ({loop}) drives the training: a measured step is one step of its optimizers"


def _audit_job(script: str, result: RunResult, rules: list[Rule], gate_options: GateOptions | None,
               command: str | None, target: str = "auto") -> Report:
    """A run under torchrun: every rank's trace analysed (in parallel processes), merged into the job's
    report as `perfaudit analyze RUN_FOLDER` would, with what happened to each rank."""
    if not result.rank_outcomes and result.stop_signal is None:
        raise LaunchError(f"torchrun could not start the job: {_last_error(result.log_path)} "
                          f"(its output: {result.log_path})")
    roots = (os.path.dirname(result.script), os.getcwd())
    report = Report([], [], [], script=result.script, outcome=result.outcome, run_dir=result.run_dir,
                    stop_signal=result.stop_signal, command=command, source_roots=list(roots))
    if result.rank_traces:
        done = job_results(result.rank_traces, rules, roots, report.notes, target)
        if done:
            combine(report, done, rules, roots)
    failed = result.outcome.get("failed_ranks") or []
    for failed_rank in failed:
        said = describe_outcome(result.rank_outcomes.get(failed_rank))
        report.notes.append(f"rank {failed_rank}: {said or 'did not finish its window'}")
    unmeasured = [r for r in result.outcome.get("unmeasured_ranks") or [] if r not in failed]
    if unmeasured:
        report.notes.append(f"rank(s) {', '.join(map(str, unmeasured))} never reached the measured window "
                            "(uneven data, or stopped when another rank failed)")
    if not result.rank_traces:
        report.notes.append(_no_trace_reason(result))
    for rank_outcome in result.rank_outcomes.values():
        report.internal_errors.extend(rank_outcome.get("internal_errors") or [])
    gate.merge_static(report, lint_paths([script], rules))
    report = gate.finalize(report, gate_options or GateOptions(), extra_files=(script,), rules=rules)
    write_run_reports(report, rules)
    return report


def _last_error(log_path: str) -> str:
    """The last line of the launcher's output that names an error, else its last line."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [l.strip() for l in f.read()[-(64 << 10):].splitlines() if l.strip()]
    except OSError:
        return "no output"
    errors = [l for l in lines if re.search(r"(Error|Exception|error:)", l)]
    return (errors or lines or ["no output"])[-1][:300]


def write_run_reports(report: Report, rules: list[Rule]) -> None:
    """Every run folder holds its report as one HTML file to open or attach, and as JSON (what `perfaudit
    diff` reads back: the findings at the lines the run and the static pass placed them)."""
    from ..report import html, json_report
    if not report.run_dir:  # no run folder (nothing was run): nowhere to keep them
        return
    renderers = {"report.html": lambda: html.render(report, rules), "report.json": lambda: json_report.render(report)}
    for name, render in renderers.items():
        path = os.path.join(report.run_dir, name)
        try:
            write_atomic(path, render())
        except WriteError as exc:
            report.notes.append(str(exc))


def _no_trace_reason(result: RunResult) -> str:
    o = result.outcome
    if Outcome.of(o) == Outcome.SPAWNED:
        return ("nothing was measured: the script starts its training in new processes "
                f"({o.get('api')}), which perfaudit does not watch; call the training function directly "
                "(one process) or launch it with torchrun")
    if o.get("write_error"):
        return f"the trace could not be saved: {o['write_error']}"
    if o.get("export_error"):
        full = o["export_error"].startswith(("OSError", "PermissionError")) or "No space" in o["export_error"]
        return f"the recorded trace could not be written: {o['export_error']}" + (" (is the disk full?)" if full else "")
    if o.get("profiling_started"):
        return "no trace was recorded before the script ended"
    if Outcome.of(o) in (Outcome.TIMEOUT, Outcome.INTERRUPTED, Outcome.CRASHED):
        return "nothing was measured: the script was stopped before its second training step"
    if o.get("optimizers_built"):
        return ("nothing was measured: an optimizer was built but never stepped, and no training step "
                "was seen before the script ended")
    return ("nothing was measured: the script never started training (no optimizer step, backward() or "
            "autograd.grad, DataLoader batch or inference call was seen before it ended)")
