"""The commands that read what is already there: `analyze` (traces), `lint` (sources), `explain` and
`rules` (the catalogue); and `mcp`, which serves the library to coding agents."""
from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Optional

import typer
from rich.table import Table

from .. import api
from .common import (
    BaselineOpt,
    BaselineWriteOpt,
    ConfigOpt,
    DebugOpt,
    FailOnOpt,
    Format,
    FormatChoiceOpt,
    FormatOpt,
    IgnoreOpt,
    OutputOpt,
    Reporting,
    RulesDirOpt,
    SelectOpt,
    TargetOpt,
    VerboseOpt,
    app,
    err,
    handles_errors,
    out,
)


@app.command()
@handles_errors
def analyze(
    traces: Annotated[list[str], typer.Argument(help="Trace files (.json / .json.gz) or directories of them; - for "
                                                     "standard input.")],
    source_root: Annotated[Optional[list[str]], typer.Option(help="Where to find the sources named in the trace.")] = None,
    jobs: Annotated[Optional[int], typer.Option(
        "--jobs", "-j", min=1, help="Traces analysed in parallel processes (default: one per CPU from 32 MB of traces).")] = None,
    target: TargetOpt = None,
    fmt: FormatOpt = None, output: OutputOpt = None, fail_on: FailOnOpt = None, config: ConfigOpt = None,
    select: SelectOpt = None, ignore: IgnoreOpt = None, baseline: BaselineOpt = None,
    baseline_write: BaselineWriteOpt = None, rules_dir: RulesDirOpt = None, verbose: VerboseOpt = False,
    debug: DebugOpt = False,
):
    """Evaluate the rules on torch.profiler / Kineto traces recorded elsewhere."""
    reporting = Reporting(config, rules_dir, select, ignore, fmt, output, baseline, baseline_write,
                          protected=tuple(traces))
    with err.status("reading traces …"):
        report = api.analyze(traces, reporting.rules, tuple(source_root or ()), reporting.settings.gate, jobs,
                             target=target or reporting.settings.config.target)
    reporting.finish(report, fail_on, verbose)


@app.command()
@handles_errors
def lint(
    paths: Annotated[list[str], typer.Argument(help="Python files or directories.")],
    fmt: FormatOpt = None, output: OutputOpt = None, fail_on: FailOnOpt = None, config: ConfigOpt = None,
    select: SelectOpt = None, ignore: IgnoreOpt = None, baseline: BaselineOpt = None,
    baseline_write: BaselineWriteOpt = None, rules_dir: RulesDirOpt = None, verbose: VerboseOpt = False,
    debug: DebugOpt = False,
):
    """Report what the source alone shows, without running it (no torch import)."""
    reporting = Reporting(config, rules_dir, select, ignore, fmt, output, baseline, baseline_write,
                          protected=tuple(paths))
    reporting.finish(api.lint(paths, reporting.rules, reporting.settings.gate), fail_on, verbose)


@app.command()
@handles_errors
def explain(
    rule_id: Annotated[str, typer.Argument(metavar="RULE", help="A rule id (SYNC001) or a tip id (T01).")],
    fmt: FormatChoiceOpt = Format.console, rules_dir: RulesDirOpt = None, debug: DebugOpt = False,
):
    """Print a rule's documentation (or the rules implementing a tip)."""
    from ..report.docs import render_rule_docs, rule_docs_dict
    chosen = api.rules_for(rule_id, rules_dir)
    if fmt == Format.json:
        sys.stdout.write(json.dumps([rule_docs_dict(r) for r in chosen], indent=2) + "\n")
    else:
        for r in chosen:
            render_rule_docs(r, out)


@app.command("rules")
@handles_errors
def list_rules(fmt: FormatChoiceOpt = Format.console, rules_dir: RulesDirOpt = None, debug: DebugOpt = False):
    """List every rule with its tips, severity and summary."""
    rules = api.rules_catalogue(rules_dir)
    if fmt == Format.json:
        rows = [{"id": r.id, "family": r.family, "title": r.title, "tips": list(r.tips), "severity": r.severity,
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


DIFF_FORMATS = ("console", "json", "markdown", "html")


@app.command()
@handles_errors
def diff(
    a: Annotated[str, typer.Argument(help="Before: a run folder, a folder of rank traces, or a trace file.")],
    b: Annotated[str, typer.Argument(help="After: the same kinds.")],
    fmt: Annotated[Optional[list[str]], typer.Option(
        "--format", "-f", help="console, json, markdown or html, repeatable, optionally with a file "
                               "(-f markdown=diff.md).")] = None,
    output: OutputOpt = None,
    source_root: Annotated[Optional[list[str]], typer.Option(help="Where to find the sources named in the traces.")] = None,
    rules_dir: RulesDirOpt = None, debug: DebugOpt = False,
):
    """Compare two runs or traces: step time with its interval, which part grew, findings that appeared,
    vanished or changed cost, the ops whose time changed most, and environment differences."""
    from ..errors import UsageError
    from ..report.diff_report import RENDERERS, render_console
    from ..report.outputs import check_writable, write_text
    specs: list[tuple[str, str | None]] = []
    for item in fmt or ["console"]:
        name, _, path = item.partition("=")
        if name not in DIFF_FORMATS or (name == "console" and path):
            raise UsageError(f"unknown diff format '{item}'; choose from {', '.join(DIFF_FORMATS)} (FORMAT=FILE "
                             "for a file)")
        specs.append((name, path or None))
    if output:  # the first format without a file gets it (JSON when only the console was asked for)
        free = next((i for i, (n, p) in enumerate(specs) if n != "console" and p is None), None)
        if free is None:
            specs.append(("json", output))
        else:
            specs[free] = (specs[free][0], output)
    check_writable([p for _, p in specs if p], protected=(a, b))
    rules = api.rules_catalogue(rules_dir) if rules_dir else None
    with err.status("reading both sides …"):
        result = api.diff(a, b, rules, tuple(source_root or ()))
    for name, dest in specs:
        if name == "console":
            render_console(result, out)
        elif dest:
            write_text(dest, RENDERERS[name](result))
        else:
            sys.stdout.write(RENDERERS[name](result))


@app.command()
@handles_errors
def mcp(debug: DebugOpt = False):
    """Serve perfaudit to coding agents: a Model Context Protocol server on stdin/stdout with the tools
    audit, analyze, explain, fix (a diff, nothing written) and verify. Needs `pip install 'perfaudit[mcp]'`."""
    from ..mcp import serve
    serve()
