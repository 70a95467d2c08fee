"""`fix` and `verify`: the findings with a mechanical fix turned into edits of the user's source (a
plan to show as a diff or write), and the A/B proof of those edits (verify/)."""
from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import replace

from ..collect.run.options import RunOptions
from ..collect.run.rundir import finish_run_dir, make_run_dir
from ..collect.run.runner import check_script
from ..engine.loader import Rule, load_rules
from ..errors import UsageError
from ..findings import Finding, Report, rank
from ..fix.plan import plan_fixes
from ..report.json_report import read_report
from ..static.cuda_path import has_cuda_path
from ..untrusted import Unreadable
from ..verify import Rounds, Variant, Verification, run_ab
from ..verify.stops import signal_name, stop_signal_of
from .analysis import analyze, looks_like_trace
from .audit import audit


def project_root(script: str) -> str:
    """The nearest folder above the script that holds a project (.git, pyproject.toml, setup.py); the
    script's own folder when there is none. `fix` edits files inside it only."""
    folder = os.path.dirname(os.path.abspath(script))
    here = folder
    while True:
        if any(os.path.exists(os.path.join(here, mark)) for mark in (".git", "pyproject.toml", "setup.py")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return folder
        here = parent


def recorded_report(source: str, rules: list[Rule], script: str | None = None) -> tuple[Report, str | None]:
    """The report of an earlier run: its folder or trace (analysed again) or its JSON report; and the
    folder relative paths in it are read from. A run of another script than `script` is refused: its
    fixes are not this script's."""
    base: str | None
    if os.path.isdir(source) or looks_like_trace(source):
        report, base = analyze([source], rules), os.getcwd()
    else:
        try:
            report, data = read_report(source)
        except FileNotFoundError:
            raise UsageError(f"--from {source}: no such run folder, trace or report") from None
        except Unreadable as exc:
            raise UsageError(f"--from {exc}") from None
        cwd = (data.get("run") or {}).get("cwd")  # where the report was made: its relative paths start there
        base = cwd if isinstance(cwd, str) and os.path.isdir(cwd) else \
            os.path.dirname(os.path.abspath(report.script)) if report.script else None
    if script and report.script and os.path.realpath(report.script) != os.path.realpath(script):
        raise UsageError(f"--from {source}: that run audited {report.script}, not {script}; fix that script, "
                         f"or run `perfaudit fix {script}` without --from")
    return report, base


def check_fixable(script: str, source: str | None, write: bool) -> None:
    """Before anything runs: the script can be run (or an earlier run is given), and with --write its
    folder can be written (a read-only checkout fails now, not after a ten-minute run)."""
    if source is None:
        check_script(script)
    if write:
        folder = os.path.dirname(os.path.abspath(script))
        if not os.access(folder, os.W_OK):
            raise UsageError(f"--write: cannot write in {folder} (read-only); print the diff without --write")
        try:
            probe = os.path.join(folder, f".perfaudit-write-check-{os.getpid()}")
            with open(probe, "w"):
                pass
            os.remove(probe)
        except OSError as exc:
            raise UsageError(f"--write: cannot write in {folder} ({exc.strerror}); print the diff without --write") from None


def fix(script: str, args: list[str], options: RunOptions, rules: list[Rule] | None = None,
        select: set[str] | None = None, source: str | None = None,
        on_progress: Callable[[dict], None] | None = None):
    """The edits for the findings of a run of SCRIPT (or of an earlier run, `source`): a FixPlan to
    show as a diff or write. Nothing is written here."""
    rules = rules if rules is not None else load_rules()
    report, base = _audited(script, args, options, rules, source, on_progress)
    return report, plan_fixes(report.findings, project_root(script), select, base)


def _audited(script: str, args: list[str], options: RunOptions, rules: list[Rule], source: str | None,
             on_progress: Callable[[dict], None] | None = None) -> tuple[Report, str | None]:
    """The report to fix: a new run of SCRIPT, or an earlier one; and the folder its relative paths
    are read from."""
    if source is not None:
        return recorded_report(source, rules, script)
    return audit(script, args, options, rules, on_progress), None


def verify(script: str, args: list[str], audit_options: RunOptions, timing_options: RunOptions,
           rounds: Rounds | int = 3,
           rules: list[Rule] | None = None, select: set[str] | None = None, source: str | None = None,
           each: bool = False, on_progress: Callable[[str], None] | None = None, end_check_s: float = 60.0):
    """Audit SCRIPT (or take an earlier run), make the fixes, and measure them: A (as it is) against B
    (all fixes, or with `each` one B per rule) over interleaved rounds, step times and losses compared.
    Returns (report, plan, verification); the user's files are not written."""
    say = on_progress or (lambda text: None)
    folder = make_run_dir(timing_options.out_dir, timing_options.keep_runs)
    say("auditing the script …")
    rules = rules if rules is not None else load_rules()
    report, base = _audited(script, args, replace(audit_options, out_dir=os.path.join(folder, "audit")), rules, source)
    stopped = stop_signal_of(report.outcome)
    if stopped is not None:  # stopped during the audit: no A/B run starts, the audit is what is shown
        finish_run_dir(folder)
        interrupted = Verification(script, args, 0, timing_options.warmup, timing_options.steps, None, [], folder)
        interrupted.interrupted = stopped
        interrupted.stopped_because = f"stopped by {signal_name(stopped)} during the audit"
        return report, plan_fixes([], project_root(script), select, base), interrupted
    root = project_root(script)
    plan = plan_fixes(report.findings, root, select, base)
    variants = [Variant("A", None)]
    if each:
        variants += [Variant(rule, plan_fixes(report.findings, root, {rule}, base)) for rule in plan.rules]
    elif plan.files:
        variants.append(Variant("B", plan))
    if len(variants) == 1:
        nothing = Verification(script, args, 0, timing_options.warmup, timing_options.steps, None, [], folder)
        if not report.measured:  # no training step: nothing could be fixed, and that is not a pass
            nothing.baseline_failure = "it never reached a training step in the audit run"
        return report, plan, nothing
    try:
        verification = run_ab(script, args, variants, folder, timing_options, rounds, say, end_check_s,
                              gpu_path=timing_options.device != "cpu" and has_cuda_path(script))
    finally:
        finish_run_dir(folder)
    for v in verification.verdicts:  # what the audit expected of these fixes, beside what verify measured
        savings = [f.saving_ms for f in report.findings
                   if f.rule in v.rules and f.evidence.get("origin") != "static" and f.saving_ms is not None]
        v.predicted_ms = sum(savings) if savings else None
        projected = [f for f in report.findings if f.rule in v.rules and f.cost.projected_ms is not None]
        if projected:
            v.projected_ms = sum(f.cost.projected_ms or 0.0 for f in projected)
            v.projected_on = projected[0].cost.projected_on
    first = report.traces[0] if report.traces else None
    verification.flops = first.mfu if first is not None and first.mfu else None
    report.findings = rank([_with_figures(f, verification) for f in report.findings])
    return report, plan, verification


def _with_figures(f: Finding, verification) -> Finding:
    """The finding with what verify measured for its fix, when it was measured and passed."""
    if f.evidence.get("origin") == "static":
        return f
    for v in verification.verdicts:
        if f.rule in v.rules and v.speed is not None and v.passed:
            s = v.speed
            interval = None if math.isnan(s.low_ms) else [-s.high_ms, -s.low_ms]  # NaN: too few steps
            return replace(f, verified={
                "saved_ms": s.saved_ms, "interval_ms": interval, "speedup_pct": s.speedup_pct, "verdict": s.verdict,
                "loss": v.loss.verdict, "loss_detail": v.loss.detail, "device": verification.device,
                "together": [r for r in v.rules if r != f.rule] or None})
    return f
