"""Command line: `perfaudit run | analyze | explain | rules`. Commands call the library API; only here do
errors become one line on stderr and an exit code."""
from __future__ import annotations

import difflib
import functools
import json
import os
import sys
import traceback
from enum import Enum
from typing import List, Optional

import typer
from rich.console import Console

from . import __version__
from .errors import (EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, EXIT_SCRIPT_FAILED, EXIT_USAGE,
                     PerfauditError, UsageError)

EXIT_INTERNAL = 4

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Audit PyTorch training performance: ranked, located, costed fixes.")
out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class FailOn(str, Enum):
    info = "info"
    warning = "warning"
    error = "error"
    never = "never"


class Format(str, Enum):
    console = "console"
    json = "json"


_state = {"debug": False}


def _exit_with_error(exc: BaseException, code: int) -> None:
    if _state["debug"]:
        traceback.print_exception(exc)
    err.print(f"[bold red]perfaudit: error:[/] {exc}", markup=True, highlight=False)
    raise typer.Exit(code)


def handles_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except PerfauditError as exc:
            _exit_with_error(exc, exc.exit_code)
        except KeyboardInterrupt:
            err.print("perfaudit: interrupted")
            raise typer.Exit(EXIT_INTERRUPTED)
        except Exception as exc:  # a bug in perfaudit: one line, the traceback with --debug
            _exit_with_error(RuntimeError(f"internal error: {type(exc).__name__}: {exc} "
                                          "(run with --debug for the traceback)"), EXIT_INTERNAL)
    return wrapper


def _version(value: bool):
    if value:
        out.print(f"perfaudit {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
):
    _state["debug"] = debug


def _load_rules(rules_dir: list[str] | None):
    from .engine.loader import load_rules
    return load_rules(tuple(rules_dir or ()))


def _emit(report, fmt: Format, output: Optional[str], verbose: bool) -> None:
    from .report import console as console_report
    from .report import json_report
    if fmt == Format.json:
        text = json_report.render(report)
        if output:
            _write(output, text)
            console_report.render(report, out, verbose)
        else:
            sys.stdout.write(text + "\n")
    else:
        console_report.render(report, out, verbose)
        if output:
            _write(output, json_report.render(report))


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from exc


def _gate(report, fail_on: FailOn) -> int:
    return EXIT_FINDINGS if report.fails(fail_on.value) else EXIT_OK


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
@handles_errors
def run(
    script: str = typer.Argument(..., help="The training script, run as `python SCRIPT ARGS`."),
    args: Optional[List[str]] = typer.Argument(None, help="Arguments for the script, after `--`."),
    warmup: int = typer.Option(2, min=0, help="Steps to run before recording."),
    steps: int = typer.Option(5, min=1, help="Steps to record."),
    full: bool = typer.Option(False, "--full", help="Let the script run to its end after the window."),
    timeout: float = typer.Option(600.0, min=0, help="Stop the script after this many seconds (0: never)."),
    out_dir: Optional[str] = typer.Option(None, help="Run folder (default ./.perfaudit/runs/<timestamp>)."),
    stack: bool = typer.Option(True, "--stack/--no-stack", help="Record Python stacks (needed for file:line)."),
    fmt: Format = typer.Option(Format.console, "--format", help="Report format."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write the JSON report to FILE."),
    fail_on: FailOn = typer.Option(FailOn.never, help="Exit 1 when a finding at or above this severity exists."),
    rules_dir: Optional[List[str]] = typer.Option(None, help="Extra rule directory (repeatable)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="List skipped rules and their reasons."),
):
    """Run SCRIPT for a bounded profiler window and report ranked fixes."""
    from .api import audit
    from .collect.runner import RunOptions
    rules = _load_rules(rules_dir)
    options = RunOptions(warmup=warmup, steps=steps, full=full, timeout=timeout or None, out_dir=out_dir,
                         with_stack=stack, record_shapes=True)
    with err.status(f"running {script} …") as status:
        def progress(event: dict) -> None:
            phase = event.get("phase")
            if phase == "profiling":
                status.update(f"profiling {script} on {event.get('device', 'cpu')}: warming up …")
            elif phase == "step":
                n, w = event["step"], event["warmup"]
                label = f"warm-up {n}/{w}" if n <= w else f"recorded step {n - w}/{event['steps']}"
                status.update(f"profiling {script}: {label}")
            elif phase == "exporting":
                status.update("writing the trace …")
        report, result = audit(script, args or [], options, rules, progress)
    _emit(report, fmt, output, verbose)
    if result.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if result.failed:
        raise typer.Exit(EXIT_SCRIPT_FAILED)
    raise typer.Exit(_gate(report, fail_on))


@app.command()
@handles_errors
def analyze(
    traces: List[str] = typer.Argument(..., help="Trace files (.json / .json.gz) or directories of them."),
    fmt: Format = typer.Option(Format.console, "--format", help="Report format."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write the JSON report to FILE."),
    fail_on: FailOn = typer.Option(FailOn.never, help="Exit 1 when a finding at or above this severity exists."),
    source_root: Optional[List[str]] = typer.Option(None, help="Where to find the sources named in the trace."),
    rules_dir: Optional[List[str]] = typer.Option(None, help="Extra rule directory (repeatable)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="List skipped rules and their reasons."),
):
    """Evaluate the rules on torch.profiler / Kineto traces recorded elsewhere."""
    from .api import analyze as analyze_traces
    rules = _load_rules(rules_dir)
    with err.status("reading traces …"):
        report = analyze_traces(traces, rules, tuple(source_root or ()))
    _emit(report, fmt, output, verbose)
    raise typer.Exit(_gate(report, fail_on))


@app.command()
@handles_errors
def explain(
    rule_id: str = typer.Argument(..., metavar="RULE", help="A rule id (SYNC001) or a tip id (T01)."),
    fmt: Format = typer.Option(Format.console, "--format", help="Output format."),
):
    """Print a rule's documentation (or the rules implementing a tip)."""
    from .report.docs import render_rule_docs, rule_docs_dict
    from .tips import TIPS
    rules = {r.id: r for r in _load_rules(None)}
    key = rule_id.upper()
    if key in rules:
        chosen = [rules[key]]
    elif key in TIPS:
        chosen = [r for r in rules.values() if key in r.tips]
        if not chosen:
            raise UsageError(f"tip {key} ({TIPS[key]}) has no rule yet")
    else:
        near = difflib.get_close_matches(key, list(rules) + list(TIPS), n=3, cutoff=0.4)
        hint = f"; did you mean {', '.join(near)}?" if near else "; `perfaudit rules` lists them"
        raise UsageError(f"unknown rule or tip '{rule_id}'{hint}")
    if fmt == Format.json:
        sys.stdout.write(json.dumps([rule_docs_dict(r) for r in chosen], indent=2) + "\n")
    else:
        for r in chosen:
            render_rule_docs(r, out)


@app.command("rules")
@handles_errors
def list_rules(
    fmt: Format = typer.Option(Format.console, "--format", help="Output format."),
    rules_dir: Optional[List[str]] = typer.Option(None, help="Extra rule directory (repeatable)."),
):
    """List every rule with its tips, severity and summary."""
    from rich.table import Table
    rules = sorted(_load_rules(rules_dir), key=lambda r: r.id)
    if fmt == Format.json:
        rows = [{"id": r.id, "family": r.family, "title": r.title, "tips": r.tips, "severity": r.severity,
                 "summary": r.summary, "path": os.path.relpath(r.path) if not r.path.startswith("..") else r.path}
                for r in rules]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    table = Table(title=f"{len(rules)} rules")
    for col in ("id", "tips", "severity", "summary"):
        table.add_column(col, overflow="fold")
    for r in rules:
        table.add_row(r.id, ",".join(r.tips), r.severity, r.summary)
    out.print(table)


def main() -> None:
    app(prog_name="perfaudit")


if __name__ == "__main__":
    main()
