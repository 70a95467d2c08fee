"""The report of `perfaudit verify`: per fix (or all together) the measured step time change with its
interval, the speed-up, and the loss check with its numbers; console and JSON."""
from __future__ import annotations

import json
import math
import signal

from rich.console import Console
from rich.markup import escape

from .. import __version__
from ..fix.plan import FixPlan
from ..verify import Verification

_SPEED_STYLE = {"faster": "green", "slower": "red", "no measurable change": "yellow", "too few steps": "yellow"}


def _interval(low: float, high: float) -> str:
    return "n/a" if math.isnan(low) else f"[{low:+.2f}, {high:+.2f}] ms"


def render_console(v: Verification, plan: FixPlan, console: Console) -> None:
    console.print(f"[bold]perfaudit verify[/] {escape(v.script)}"
                  + (f" -- {escape(' '.join(v.args))}" if v.args else ""), highlight=False)
    if v.baseline_failure:
        console.print(f"[red]the script as it is did not reach its window: {escape(v.baseline_failure)}[/]")
        return
    if v.interrupted and not v.verdicts:
        console.print(f"verify was stopped before any fix was measured ({escape(v.stopped_because or 'stopped')})")
        return
    if not v.verdicts:
        console.print("nothing to verify: no finding of this run has an automatic fix (`perfaudit fix` says why)")
        return
    print_rounds(v, console)
    for verdict in v.verdicts:
        label = f"all fixes ({', '.join(verdict.rules)})" if verdict.name == "B" else verdict.name
        console.print(f"\n[bold]{escape(label)}[/]:", highlight=False)
        for c in verdict.changes:
            console.print(f"  {escape(c.path)}:{c.line}  {c.rule}  {escape(c.what)}", highlight=False)
        if verdict.broke:
            console.print(f"  [bold red]BROKE THE SCRIPT[/]: with the fix {escape(verdict.broke)}; A ran fine")
            continue
        s, loss = verdict.speed, verdict.loss
        if s is None or loss is None:  # not timed: a stopped verify
            continue
        style = _SPEED_STYLE.get(s.verdict, "")
        how = f"{abs(s.change_pct):.1f}% {'faster' if s.delta_ms < 0 else 'slower'}" if s.delta_ms else "the same"
        if math.isnan(s.delta_ms):  # no counted step on one side: every run of it waited for a CPU
            how = "not measured"
        said = s.verdict
        if said == "no measurable change" and s.within_tolerance:
            said = f"no change beyond ±{s.tolerance_pct:g}%"
        console.print(f"  step time  {s.mean_a_ms:.2f} → {s.mean_b_ms:.2f} ms ({s.delta_ms:+.2f} ms, {how}): "
                      f"[{style}]{said}[/]", highlight=False)
        console.print(f"             95% interval of the change {_interval(s.low_ms, s.high_ms)}, "
                      f"{s.n_a} + {s.n_b} steps", highlight=False)
        if verdict.projected_ms is not None:
            console.print(f"  on {escape(verdict.projected_on or 'the target')}  projected saving "
                          f"{verdict.projected_ms:.2f} ms/step (the audit's model of that GPU, not measured here)",
                          highlight=False)
        rates = v.flop_rates(verdict)
        if rates:
            console.print(f"  {_rates_text(rates)}", highlight=False)
        style = "green" if loss.passed else "bold red"
        shout = "LOSS CHANGED: " if not loss.passed else ""
        console.print(f"  loss       [{style}]{shout}{loss.verdict}[/]: {escape(loss.detail)}", highlight=False)
        for ex in verdict.exercises:
            console.print(f"  past the window  {escape(ex.ended)}", highlight=False)
            for line in ex.missed_edits:
                why = ("had not run when the check stopped: not proven past the window" if ex.stopped
                       else "never ran in these runs: cannot prove it")
                console.print(f"    [yellow]not exercised[/]: edited line {line} {why}", highlight=False)
            for line, code in ex.missed_uses:
                console.print(f"    [yellow]not reached[/]: line {line} `{escape(code[:60])}` uses what the fix "
                              "changed and did not run: unproven", highlight=False)
    for note in v.notes:
        console.print(f"\nnote: {escape(note)}", highlight=False)
    console.print(f"\nruns: {escape(v.folder)}" + ("" if v.passed else "  — verify failed: see above"),
                  highlight=False)
    if v.passed and any(x.speed and x.speed.verdict == "faster" for x in v.verdicts):
        console.print("apply the measured fixes with `perfaudit fix --write`", highlight=False)


def print_rounds(v: Verification, console: Console, extra: str = "") -> None:
    """The A/B rounds' line (device, rounds, steps; `extra` after them) and why they stopped."""
    console.print(f"A/B on {v.device or 'cpu'}: {v.rounds} round{'s' if v.rounds != 1 else ''}, {v.warmup} warm-up + "
                  f"{v.steps} measured steps a run, same seeds{extra}", highlight=False)
    if v.stopped_because:
        console.print(f"rounds stopped: {escape(v.stopped_because)}", highlight=False)


def _rates_text(r: dict) -> str:
    """MFU (a GPU of the peak table) or the model's FLOP rate, A to B measured, and what the audit predicted."""
    if r["mfu_a"] is not None:
        text = f"MFU        {100 * r['mfu_a']:.1f} % → {100 * r['mfu_b']:.1f} % measured"
        return text + (f" (predicted {100 * r['mfu_predicted']:.1f} %)" if r["mfu_predicted"] is not None else "")

    def rate(t: float) -> str:
        return f"{t:.2f} TFLOP/s" if t >= 1 else f"{t * 1000:.1f} GFLOP/s"
    text = f"FLOP rate  {rate(r['tflops_a'])} → {rate(r['tflops_b'])} measured"
    return text + (f" (predicted {rate(r['tflops_predicted'])})" if r["tflops_predicted"] is not None else "")


def to_dict(v: Verification) -> dict:
    def speed(s):
        if s is None:
            return None
        return {"mean_a_ms": s.mean_a_ms, "mean_b_ms": s.mean_b_ms, "saved_ms_per_step": s.saved_ms,
                "interval_ms": None if math.isnan(s.low_ms) else [s.low_ms, s.high_ms], "confidence": 0.95,
                "speedup_pct": s.speedup_pct, "change_pct": s.change_pct, "steps": [s.n_a, s.n_b],
                "verdict": s.verdict, "within_tolerance": s.within_tolerance, "tolerance_pct": s.tolerance_pct}
    return {
        "tool": {"name": "perfaudit", "version": __version__},
        "script": v.script, "args": v.args, "device": v.device, "rounds": v.rounds, "warmup": v.warmup,
        "steps": v.steps, "folder": v.folder, "passed": v.passed, "baseline_failure": v.baseline_failure,
        "stopped_because": v.stopped_because,
        "busy_share": round(v.busy_share, 3),   # the larger share of runs, or of steps, that waited for a CPU
        "interrupted": None if v.interrupted is None else signal.Signals(v.interrupted).name,
        "fixes": [{"name": x.name, "rules": x.rules, "passed": x.passed, "broke": x.broke,
                   "changes": [{"rule": c.rule, "path": c.path, "line": c.line, "what": c.what, "kind": c.kind}
                               for c in x.changes],
                   "speed": speed(x.speed), "predicted_saved_ms_per_step": x.predicted_ms,
                   "projected_saved_ms_per_step": x.projected_ms, "projected_on": x.projected_on,
                   "flop_rates": v.flop_rates(x),
                   "past_the_window": [{"path": e.path, "ended": e.ended, "not_exercised": e.missed_edits,
                                        "uses_not_reached": [{"line": n, "code": c} for n, c in e.missed_uses]}
                                       for e in x.exercises],
                   "loss": None if x.loss is None else {"verdict": x.loss.verdict, "detail": x.loss.detail,
                                                        "passed": x.loss.passed}}
                  for x in v.verdicts],
        "notes": v.notes,
    }


def render_json(v: Verification) -> str:
    return json.dumps(to_dict(v), indent=2)
