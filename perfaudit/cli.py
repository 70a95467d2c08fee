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
from .errors import (EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, EXIT_SCRIPT_FAILED, PerfauditError, UsageError)

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


REPORT_FORMATS = ("console", "json", "sarif", "junit", "markdown", "github")
FORMAT_HELP = ("Report format, repeatable, optionally with a file: console, json, sarif, junit, markdown, "
               "github (e.g. --format sarif=perfaudit.sarif --format markdown=summary.md).")


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


def _setup(config_path: Optional[str], rules_dir: Optional[List[str]], select: Optional[List[str]],
           ignore: Optional[List[str]]):
    """Config file (flags override it) and the selected rules."""
    from .config import apply_to_rules, load_config
    from .engine.loader import load_rules
    cfg = load_config(config_path)
    if select:
        cfg.select = [v.upper() for item in select for v in item.split(",") if v]
    if ignore:
        cfg.ignore = cfg.ignore + [v.upper() for item in ignore for v in item.split(",") if v]
    all_rules = load_rules(tuple(cfg.rules_dirs) + tuple(rules_dir or ()))
    return cfg, all_rules, apply_to_rules(cfg, all_rules)


def _parse_formats(formats: Optional[List[str]], output: Optional[str]) -> list[tuple[str, Optional[str]]]:
    specs = []
    for item in formats or ["console"]:
        fmt, _, path = item.partition("=")
        fmt = fmt.strip().lower()
        if fmt not in REPORT_FORMATS:
            raise UsageError(f"unknown format '{fmt}'; choose from {', '.join(REPORT_FORMATS)}")
        specs.append((fmt, path or None))
    if output:  # --output FILE: the first format without a file (the JSON report when only console)
        for i, (fmt, path) in enumerate(specs):
            if fmt != "console" and path is None:
                specs[i] = (fmt, output)
                break
        else:
            specs.append(("json", output))
    if sum(1 for fmt, path in specs if path is None and fmt != "console") > 1:
        raise UsageError("only one format can go to standard output; give the others a file (FORMAT=FILE)")
    return specs


def _render(report, fmt: str, rules, verbose: bool) -> str:
    from .report import github, json_report, junit, markdown, sarif
    if fmt == "json":
        return json_report.render(report)
    if fmt == "sarif":
        return sarif.render(report, rules)
    if fmt == "junit":
        return junit.render(report, rules)
    if fmt == "markdown":
        return markdown.render(report)
    return github.render(report)


def _emit(report, formats: Optional[List[str]], output: Optional[str], rules, verbose: bool) -> None:
    from .report import console as console_report
    specs = _parse_formats(formats, output)
    to_stdout = [fmt for fmt, path in specs if path is None and fmt != "console"]
    for fmt, path in specs:
        if fmt == "console":
            continue
        text = _render(report, fmt, rules, verbose)
        if path:
            _write(path, text.rstrip("\n"))
        else:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
    if ("console", None) in specs or not to_stdout:
        console_report.render(report, out, verbose)


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from exc


def _gate(report, fail_on: Optional[FailOn], cfg) -> int:
    level = fail_on.value if fail_on else (cfg.fail_on or "never")
    return EXIT_FINDINGS if report.fails(level) else EXIT_OK


_FORMAT_OPT = typer.Option(None, "--format", "-f", help=FORMAT_HELP)
_OUTPUT_OPT = typer.Option(None, "--output", "-o", help="Write the report to FILE (JSON unless --format says).")
_FAIL_OPT = typer.Option(None, help="Exit 1 when a finding at or above this severity exists (default: config, else never).")
_CONFIG_OPT = typer.Option(None, "--config", help="Config file (default: ./perfaudit.toml, else [tool.perfaudit] in ./pyproject.toml).")
_SELECT_OPT = typer.Option(None, "--select", help="Only these rules: ids, families (SYNC) or tips (T05); comma-separated, repeatable.")
_IGNORE_OPT = typer.Option(None, "--ignore", help="Skip these rules: ids, families or tips.")
_BASELINE_OPT = typer.Option(None, "--baseline", help="Report (and fail on) only findings not in this baseline file.")
_BASELINE_WRITE_OPT = typer.Option(None, "--baseline-write", help="Record today's findings as the baseline.")
_RULES_DIR_OPT = typer.Option(None, help="Extra rule directory (repeatable).")
_VERBOSE_OPT = typer.Option(False, "--verbose", "-v", help="List skipped rules and their reasons.")


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
@handles_errors
def run(
    script: str = typer.Argument(..., help="The training script, run as `python SCRIPT ARGS`."),
    args: Optional[List[str]] = typer.Argument(None, help="Arguments for the script, after `--`."),
    warmup: Optional[int] = typer.Option(None, min=0, help="Steps to run before recording (default 2)."),
    steps: Optional[int] = typer.Option(None, min=1, help="Steps to record (default 5)."),
    full: bool = typer.Option(False, "--full", help="Let the script run to its end after the window."),
    timeout: float = typer.Option(600.0, min=0, help="Stop the script after this many seconds (0: never)."),
    out_dir: Optional[str] = typer.Option(None, help="Run folder (default ./.perfaudit/runs/<timestamp>)."),
    stack: bool = typer.Option(True, "--stack/--no-stack", help="Record Python stacks (needed for file:line)."),
    fmt: Optional[List[str]] = _FORMAT_OPT,
    output: Optional[str] = _OUTPUT_OPT,
    fail_on: Optional[FailOn] = _FAIL_OPT,
    config: Optional[str] = _CONFIG_OPT,
    select: Optional[List[str]] = _SELECT_OPT,
    ignore: Optional[List[str]] = _IGNORE_OPT,
    baseline: Optional[str] = _BASELINE_OPT,
    baseline_write: Optional[str] = _BASELINE_WRITE_OPT,
    rules_dir: Optional[List[str]] = _RULES_DIR_OPT,
    verbose: bool = _VERBOSE_OPT,
):
    """Run SCRIPT for a bounded profiler window and report ranked fixes."""
    from .api import audit
    from .collect.runner import RunOptions
    from .gate import confirm_static, finalize
    from .lint import lint
    cfg, all_rules, rules = _setup(config, rules_dir, select, ignore)
    _parse_formats(fmt, output)  # bad formats fail before the script runs
    needs = set().union(*(r.needs() for r in rules)) if rules else set()
    # the cheapest recording the selected rules need: stacks and shapes only when a rule reads them
    options = RunOptions(warmup=warmup if warmup is not None else (cfg.warmup if cfg.warmup is not None else 2),
                         steps=steps if steps is not None else (cfg.steps or 5), full=full,
                         timeout=timeout or None, out_dir=out_dir, with_stack=stack and "stacks" in needs,
                         record_shapes="shapes" in needs)
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
    confirm_static(report, lint([script], rules))
    finalize(report, cfg, baseline, baseline_write, extra_files=(script,), rules=rules)
    _emit(report, fmt, output, all_rules, verbose)
    if result.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if result.failed:
        raise typer.Exit(EXIT_SCRIPT_FAILED)
    raise typer.Exit(_gate(report, fail_on, cfg))


@app.command()
@handles_errors
def analyze(
    traces: List[str] = typer.Argument(..., help="Trace files (.json / .json.gz) or directories of them."),
    fmt: Optional[List[str]] = _FORMAT_OPT,
    output: Optional[str] = _OUTPUT_OPT,
    fail_on: Optional[FailOn] = _FAIL_OPT,
    source_root: Optional[List[str]] = typer.Option(None, help="Where to find the sources named in the trace."),
    config: Optional[str] = _CONFIG_OPT,
    select: Optional[List[str]] = _SELECT_OPT,
    ignore: Optional[List[str]] = _IGNORE_OPT,
    baseline: Optional[str] = _BASELINE_OPT,
    baseline_write: Optional[str] = _BASELINE_WRITE_OPT,
    rules_dir: Optional[List[str]] = _RULES_DIR_OPT,
    verbose: bool = _VERBOSE_OPT,
):
    """Evaluate the rules on torch.profiler / Kineto traces recorded elsewhere."""
    from .api import analyze as analyze_traces
    from .gate import finalize
    cfg, all_rules, rules = _setup(config, rules_dir, select, ignore)
    _parse_formats(fmt, output)
    with err.status("reading traces …"):
        report = analyze_traces(traces, rules, tuple(source_root or ()))
    finalize(report, cfg, baseline, baseline_write, rules=rules)
    _emit(report, fmt, output, all_rules, verbose)
    raise typer.Exit(_gate(report, fail_on, cfg))


@app.command()
@handles_errors
def lint(
    paths: List[str] = typer.Argument(..., help="Python files or directories."),
    fmt: Optional[List[str]] = _FORMAT_OPT,
    output: Optional[str] = _OUTPUT_OPT,
    fail_on: Optional[FailOn] = _FAIL_OPT,
    config: Optional[str] = _CONFIG_OPT,
    select: Optional[List[str]] = _SELECT_OPT,
    ignore: Optional[List[str]] = _IGNORE_OPT,
    baseline: Optional[str] = _BASELINE_OPT,
    baseline_write: Optional[str] = _BASELINE_WRITE_OPT,
    rules_dir: Optional[List[str]] = _RULES_DIR_OPT,
    verbose: bool = _VERBOSE_OPT,
):
    """Report what the source alone shows, without running it (no torch import)."""
    from .api import Report
    from .findings import rank
    from .gate import finalize
    from .lint import lint as lint_paths
    from .lint import python_files
    cfg, all_rules, rules = _setup(config, rules_dir, select, ignore)
    _parse_formats(fmt, output)
    files = python_files(paths)
    report = Report(rank(lint_paths(files, rules)), [], [])
    report.notes.append(f"static pass over {len(files)} file(s); `perfaudit run` measures what it finds")
    finalize(report, cfg, baseline, baseline_write, extra_files=tuple(files), rules=rules)
    _emit(report, fmt, output, all_rules, verbose)
    raise typer.Exit(_gate(report, fail_on, cfg))


@app.command()
@handles_errors
def explain(
    rule_id: str = typer.Argument(..., metavar="RULE", help="A rule id (SYNC001) or a tip id (T01)."),
    fmt: Format = typer.Option(Format.console, "--format", help="Output format."),
):
    """Print a rule's documentation (or the rules implementing a tip)."""
    from .report.docs import render_rule_docs, rule_docs_dict
    from .tips import TIPS
    from .engine.loader import load_rules
    rules = {r.id: r for r in load_rules()}
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

    from .engine.loader import load_rules
    rules = sorted(load_rules(tuple(rules_dir or ())), key=lambda r: r.id)
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
