"""Command line: `perfaudit run | fix | verify | analyze | lint | explain | rules`. Commands parse their options, call
the library API (which returns the finished report), print it and exit; only here do errors become one
line on stderr and an exit code."""
from __future__ import annotations

import difflib
import functools
import json
import os
import shlex
import sys
import traceback
from enum import Enum
from typing import Annotated, Optional

import typer
from rich.console import Console

from . import __version__
from .errors import EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, EXIT_SCRIPT_FAILED, PerfauditError, UsageError

EXIT_INTERNAL = 4
_HELP = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings=_HELP, help="Audit PyTorch training performance: ranked, located, costed fixes.")
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


REPORT_FORMATS = ("console", "json", "sarif", "junit", "markdown", "github", "html")

# Options shared by the commands, declared once.
FormatOpt = Annotated[Optional[list[str]], typer.Option(
    "--format", "-f", help="Report format, repeatable, optionally with a file: console, json, sarif, junit, "
                           "markdown, github, html (e.g. -f sarif=perfaudit.sarif -f html=report.html).")]
OutputOpt = Annotated[Optional[str], typer.Option(
    "--output", "-o", help="Write the report to FILE (JSON unless --format says).")]
FailOnOpt = Annotated[Optional[FailOn], typer.Option(
    help="Exit 1 when a finding at or above this severity exists (default: config, else never).")]
ConfigOpt = Annotated[Optional[str], typer.Option(
    "--config", help="Config file (default: ./perfaudit.toml, else [tool.perfaudit] in ./pyproject.toml).")]
SelectOpt = Annotated[Optional[list[str]], typer.Option(
    "--select", help="Only these rules: ids, families (SYNC) or tips (T05); comma-separated, repeatable.")]
IgnoreOpt = Annotated[Optional[list[str]], typer.Option("--ignore", help="Skip these rules: ids, families or tips.")]
BaselineOpt = Annotated[Optional[str], typer.Option(
    "--baseline", help="Report (and fail on) only findings not in this baseline file.")]
BaselineWriteOpt = Annotated[Optional[str], typer.Option(
    "--baseline-write", help="Record today's findings as the baseline.")]
RulesDirOpt = Annotated[Optional[list[str]], typer.Option(help="Extra rule directory (repeatable).")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="List skipped rules and their reasons.")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")]
FormatChoiceOpt = Annotated[Format, typer.Option("--format", help="Output format.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress line on stderr while the script runs.")]

_state = {"debug": False}


def _exit_with_error(exc: BaseException, code: int) -> None:
    if _state["debug"]:
        traceback.print_exception(exc)
    err.print(f"[bold red]perfaudit: error:[/] {exc}", markup=True, highlight=False)
    raise typer.Exit(code)


def handles_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _state["debug"] = _state["debug"] or bool(kwargs.get("debug"))
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except PerfauditError as exc:
            _exit_with_error(exc, exc.exit_code)
        except KeyboardInterrupt:
            err.print("perfaudit: interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
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
    debug: DebugOpt = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version.")] = False,
):
    _state["debug"] = debug


# -- the shared beginning and ending of a command ------------------------------------------------------
class Setup:
    """What every reporting command needs before it runs: config, rules, report destinations, gate."""

    def __init__(self, config_path, rules_dir, select, ignore, formats, output, baseline, baseline_write):
        from .config import apply_to_rules, load_config
        from .engine.loader import load_rules
        from .gate import GateOptions
        self.cfg = load_config(config_path)
        if select:
            self.cfg.override("select", select, "--select")
        if ignore:
            self.cfg.override("ignore", ignore, "--ignore", extend=True)
        self.all_rules = load_rules(tuple(self.cfg.rules_dirs) + tuple(rules_dir or ()))
        self.rules = apply_to_rules(self.cfg, self.all_rules)
        self.specs = _parse_formats(formats, output)
        _check_writable([path for _, path in self.specs if path] + ([baseline_write] if baseline_write else []))
        if baseline:
            from . import baseline as baseline_file
            baseline_file.read(baseline)  # a missing or corrupt baseline fails now, not after the run
        self.gate = GateOptions(self.cfg, baseline, baseline_write)

    def finish(self, report, fail_on: Optional[FailOn], verbose: bool, extra_exit: int | None = None,
               needs_training: bool = False):
        """Print and write the report, then exit: `extra_exit` (the script failed, the run was
        interrupted) wins over the gate. With `needs_training`, an active gate fails a run in which no
        training step was measured (nothing measured is not a pass), unless allowed."""
        level = fail_on.value if fail_on else (self.cfg.fail_on or "never")
        unmeasured = needs_training and level != "never" and not report.measured and not self.cfg.allow_no_training
        if unmeasured:
            report.notes.append(f"gate (--fail-on {level}): no training step was measured, so nothing was "
                                "checked; this fails the gate (--allow-no-training to let it pass)")
        report.command = _command()
        _emit(report, self.specs, self.all_rules, verbose)
        failed = report.fails(level) or unmeasured
        raise typer.Exit(extra_exit if extra_exit is not None else EXIT_FINDINGS if failed else EXIT_OK)


def _command() -> str:
    return "perfaudit " + shlex.join(sys.argv[1:])


def _parse_formats(formats: Optional[list[str]], output: Optional[str]) -> list[tuple[str, Optional[str]]]:
    specs = []
    for item in formats or ["console"]:
        fmt, _, path = item.partition("=")
        fmt = fmt.strip().lower()
        if fmt not in REPORT_FORMATS:
            raise UsageError(f"unknown format '{fmt}'; choose from {', '.join(REPORT_FORMATS)}")
        if fmt == "console" and path:
            raise UsageError("the console report goes to the terminal; for a file use another format "
                             "(-f markdown=FILE, -f json=FILE)")
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


def _check_writable(paths: list[str]) -> None:
    """Report files are checked before anything runs: a typo must not cost a ten-minute run."""
    for path in paths:
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise UsageError(f"cannot write {path}: it is a directory")
        if not os.path.isdir(folder):
            raise UsageError(f"cannot write {path}: folder {folder} does not exist")
        if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
            raise UsageError(f"cannot write {path}: permission denied")


def _render(report, fmt: str, rules) -> str:
    from .report import github, html, json_report, junit, markdown, sarif
    renderers = {"json": lambda: json_report.render(report), "sarif": lambda: sarif.render(report, rules),
                 "html": lambda: html.render(report, rules),
                 "junit": lambda: junit.render(report, rules), "markdown": lambda: markdown.render(report),
                 "github": lambda: github.render(report)}
    return renderers[fmt]()


def _stdout_gone() -> None:
    """The reader of our output went away (`| head`): stop writing, keep the exit code meaningful."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _emit(report, specs, rules, verbose: bool) -> None:
    from .report import console as console_report
    to_stdout = [fmt for fmt, path in specs if path is None and fmt != "console"]
    try:
        for fmt, path in specs:
            if fmt != "console" and path is None:
                text = _render(report, fmt, rules)
                sys.stdout.write(text if text.endswith("\n") else text + "\n")
        if ("console", None) in specs or not to_stdout:
            console_report.render(report, out, verbose)
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_gone()
    failed = []
    for fmt, path in specs:  # files after the console: a file that cannot be written loses nothing else
        if path:
            try:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(_render(report, fmt, rules).rstrip("\n") + "\n")
            except OSError as exc:
                failed.append(f"cannot write {path}: {exc.strerror}")
    if failed:
        raise UsageError("; ".join(failed))


def _emit_files(report, specs, rules) -> None:
    """The report in the formats asked for, without the console default (`verify -f json=FILE`)."""
    from .report import console as console_report
    for fmt, path in specs:
        if path:
            with open(path, "w", encoding="utf-8") as f:
                f.write(_render(report, fmt, rules).rstrip("\n") + "\n")
        elif fmt == "console":
            out.print()
            console_report.render(report, out)
        else:
            sys.stdout.write(_render(report, fmt, rules).rstrip("\n") + "\n")


# -- commands ------------------------------------------------------------------------------------------
@app.command()
@handles_errors
def run(
    script: Annotated[str, typer.Argument(help="The training script, run as `python SCRIPT ARGS`.")],
    args: Annotated[Optional[list[str]], typer.Argument(help="Arguments for the script, after `--`.")] = None,
    warmup: Annotated[Optional[int], typer.Option(min=0, help="Steps to run before recording (default 2).")] = None,
    steps: Annotated[Optional[int], typer.Option(min=1, help="Steps to record (default 5).")] = None,
    full: Annotated[bool, typer.Option("--full", help="Let the script run to its end after the window.")] = False,
    timeout: Annotated[float, typer.Option(min=0, help="Stop the script after this many seconds (0: never).")] = 600.0,
    out_dir: Annotated[Optional[str], typer.Option(help="Run folder (default ./.perfaudit/runs/<timestamp>).")] = None,
    stack: Annotated[bool, typer.Option("--stack/--no-stack", help="Record Python stacks (needed for file:line).")] = True,
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
    from .api import audit
    setup = Setup(config, rules_dir, select, ignore, fmt, output, baseline, baseline_write)
    cfg, rules = setup.cfg, setup.rules
    cfg.allow_no_training = cfg.allow_no_training or allow_no_training
    needs = set().union(*(r.needs() for r in rules)) if rules else set()
    options = _run_options(cfg, needs, warmup, steps, full, timeout, out_dir, stack)
    launch = {"--nproc-per-node": nproc_per_node, "--nnodes": nnodes, "--node-rank": node_rank,
              "--rdzv-endpoint": rdzv_endpoint, "--rdzv-backend": rdzv_backend, "--rdzv-id": rdzv_id,
              "--master-addr": master_addr, "--master-port": master_port}
    if any(v is not None for v in launch.values()):  # torchrun's own options, passed through
        options.launch = [item for key, value in launch.items() if value is not None for item in (key, str(value))]
    with _status(f"running {script} …", quiet) as status:
        report = audit(script, args or [], options, rules, _progress(status, script), setup.gate, _command())
    extra = 128 + report.stop_signal if report.stop_signal else EXIT_SCRIPT_FAILED if report.script_failed else None
    setup.finish(report, fail_on, verbose, extra, needs_training=True)


class _Silent:
    """A progress line that says nothing (--quiet)."""

    def update(self, *args, **kwargs) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def _status(text: str, quiet: bool):
    """The progress line on stderr: only on a terminal (rich stays silent otherwise), never with --quiet."""
    return _Silent() if quiet else err.status(text)


def _progress(status, script: str):
    """The progress line's text from the child's progress records: what it is doing, and for how long."""
    import time
    started, state = time.monotonic(), {"text": f"starting {script} …", "waiting": True}

    def progress(event: dict) -> None:
        phase = event.get("phase")
        if phase == "running":
            state["text"] = f"{script}: waiting for training to start"
        elif phase in ("profiling", "sized"):
            state["waiting"] = False
            state["text"] = f"{script}: training started, warming up"
        elif phase == "step":
            state["waiting"] = False
            n, w = event["step"], event["warmup"]
            state["text"] = f"{script}: warm-up {n}/{w}" if n <= w else f"{script}: recording step {n - w}/{event['steps']}"
        elif phase == "exporting":
            state["text"] = f"{script}: writing the trace"
        elif phase == "done":
            state["text"] = "analysing the trace"
        elapsed = time.monotonic() - started
        status.update(state["text"] + (f" ({elapsed:.0f} s)" if state["waiting"] else " …"))
    return progress


def _run_options(cfg, needs: set, warmup, steps, full=False, timeout=600.0, out_dir=None, stack=True):
    """The cheapest recording the selected rules need: stacks and shapes only when a rule reads them."""
    from .collect.runner import RunOptions
    return RunOptions(warmup=warmup if warmup is not None else (cfg.warmup if cfg.warmup is not None else 2),
                      steps=steps if steps is not None else (cfg.steps or 5), full=full,
                      timeout=timeout or None, out_dir=out_dir, with_stack=stack and "stacks" in needs,
                      record_shapes="shapes" in needs, keep_runs=cfg.keep_runs)


@app.command()
@handles_errors
def fix(
    script: Annotated[str, typer.Argument(help="The training script, run as `python SCRIPT ARGS`.")],
    args: Annotated[Optional[list[str]], typer.Argument(help="Arguments for the script, after `--`.")] = None,
    write: Annotated[bool, typer.Option("--write", help="Apply the edits (default: print them as a diff).")] = False,
    source: Annotated[Optional[str], typer.Option(
        "--from", help="Fix what an earlier run found: its run folder, trace or JSON report (no new run).")] = None,
    warmup: Annotated[Optional[int], typer.Option(min=0, help="Steps to run before recording (default 2).")] = None,
    steps: Annotated[Optional[int], typer.Option(min=1, help="Steps to record (default 5).")] = None,
    out_dir: Annotated[Optional[str], typer.Option(help="Run folder (default ./.perfaudit/runs/<timestamp>).")] = None,
    config: ConfigOpt = None, select: SelectOpt = None, ignore: IgnoreOpt = None, rules_dir: RulesDirOpt = None,
    quiet: QuietOpt = False, debug: DebugOpt = False,
):
    """Turn the findings with a mechanical fix into edits of your source: a diff, or --write."""
    from .api import fix as plan
    from .collect.runner import check_script
    from .report.fix_console import render_plan
    setup = Setup(config, rules_dir, select, ignore, None, None, None, None)
    if source is None:
        check_script(script)
    needs = set().union(*(r.needs() for r in setup.rules)) if setup.rules else set()
    options = _run_options(setup.cfg, needs, warmup, steps, out_dir=out_dir)
    with _status(f"running {script} …", quiet) as status:
        report, fixes = plan(script, args or [], options, setup.rules, {r.id for r in setup.rules}, source,
                             _progress(status, script))
    try:
        diff = fixes.diff()
        if diff and not write:
            sys.stdout.write(diff)
            sys.stdout.flush()
    except BrokenPipeError:
        _stdout_gone()
    written = fixes.write() if write else []
    render_plan(report, fixes, written, err)
    # as `ruff --diff`: a diff with changes to make exits 1, so that CI can ask "anything to fix?"
    raise typer.Exit(EXIT_FINDINGS if fixes.files and not write else EXIT_OK)


@app.command()
@handles_errors
def verify(
    script: Annotated[str, typer.Argument(help="The training script, run as `python SCRIPT ARGS`.")],
    args: Annotated[Optional[list[str]], typer.Argument(help="Arguments for the script, after `--`.")] = None,
    each: Annotated[bool, typer.Option("--each", help="Measure every fix on its own (one B per rule).")] = False,
    rounds: Annotated[int, typer.Option(min=1, help="Interleaved A/B rounds (each a fresh process).")] = 3,
    warmup: Annotated[int, typer.Option(min=0, help="Steps each A/B run takes before measuring.")] = 3,
    steps: Annotated[int, typer.Option(min=1, help="Steps each A/B run measures.")] = 15,
    seed: Annotated[int, typer.Option(help="Seed for random, torch and numpy, the same in A and B.")] = 0,
    source: Annotated[Optional[str], typer.Option(
        "--from", help="Verify what an earlier run found: its run folder, trace or JSON report.")] = None,
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

    Your files are never written. Step time comes with a 95% interval; exits 1 when a fix breaks the
    script or changes the loss."""
    from .api import verify as verify_fixes
    from .collect.runner import check_script
    from .report.verify_report import render_console, render_json
    setup = Setup(config, rules_dir, select, ignore, fmt, None, None, None)
    check_script(script)
    if output:
        _check_writable([output])
    needs = set().union(*(r.needs() for r in setup.rules)) if setup.rules else set()
    audit_options = _run_options(setup.cfg, needs, None, None, timeout=timeout)
    timing_options = _run_options(setup.cfg, set(), warmup, steps, timeout=timeout, out_dir=out_dir)
    timing_options.seed = seed
    with _status(f"verifying {script} …", quiet) as status:
        report, plan, result = verify_fixes(script, args or [], audit_options, timing_options, rounds, setup.rules,
                                            {r.id for r in setup.rules}, source, each,
                                            lambda text: status.update(f"verifying {script}: {text}"))
    render_console(result, plan, out)
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(render_json(result) + "\n")
    if fmt:
        _emit_files(report, setup.specs, setup.all_rules)
    if result.baseline_failure:
        raise typer.Exit(EXIT_SCRIPT_FAILED)
    raise typer.Exit(EXIT_OK if result.passed else EXIT_FINDINGS)


@app.command()
@handles_errors
def analyze(
    traces: Annotated[list[str], typer.Argument(help="Trace files (.json / .json.gz) or directories of them.")],
    source_root: Annotated[Optional[list[str]], typer.Option(help="Where to find the sources named in the trace.")] = None,
    jobs: Annotated[Optional[int], typer.Option(
        "--jobs", "-j", min=1, help="Traces analysed in parallel processes (default: one per CPU from 32 MB of traces).")] = None,
    fmt: FormatOpt = None, output: OutputOpt = None, fail_on: FailOnOpt = None, config: ConfigOpt = None,
    select: SelectOpt = None, ignore: IgnoreOpt = None, baseline: BaselineOpt = None,
    baseline_write: BaselineWriteOpt = None, rules_dir: RulesDirOpt = None, verbose: VerboseOpt = False,
    debug: DebugOpt = False,
):
    """Evaluate the rules on torch.profiler / Kineto traces recorded elsewhere."""
    from .api import analyze as analyze_traces
    setup = Setup(config, rules_dir, select, ignore, fmt, output, baseline, baseline_write)
    with err.status("reading traces …"):
        report = analyze_traces(traces, setup.rules, tuple(source_root or ()), setup.gate, jobs)
    setup.finish(report, fail_on, verbose)


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
    from .api import lint as lint_paths
    setup = Setup(config, rules_dir, select, ignore, fmt, output, baseline, baseline_write)
    setup.finish(lint_paths(paths, setup.rules, setup.gate), fail_on, verbose)


@app.command()
@handles_errors
def explain(
    rule_id: Annotated[str, typer.Argument(metavar="RULE", help="A rule id (SYNC001) or a tip id (T01).")],
    fmt: FormatChoiceOpt = Format.console, rules_dir: RulesDirOpt = None, debug: DebugOpt = False,
):
    """Print a rule's documentation (or the rules implementing a tip)."""
    from .engine.loader import load_rules
    from .report.docs import render_rule_docs, rule_docs_dict
    from .tips import TIPS
    rules = {r.id: r for r in load_rules(tuple(rules_dir or ()))}
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
def list_rules(fmt: FormatChoiceOpt = Format.console, rules_dir: RulesDirOpt = None, debug: DebugOpt = False):
    """List every rule with its tips, severity and summary."""
    from rich.table import Table

    from .engine.loader import load_rules
    rules = sorted(load_rules(tuple(rules_dir or ())), key=lambda r: r.id)
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


def main() -> None:
    try:
        code = app(prog_name="perfaudit", standalone_mode=False)
    except BrokenPipeError:  # `perfaudit rules | head`: the reader left; that is not a failure
        _stdout_gone()
        code = EXIT_OK
    except Exception as exc:
        if type(exc).__name__ == "Abort":
            err.print("perfaudit: interrupted")
            sys.exit(EXIT_INTERRUPTED)
        if not (hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int)):
            raise
        # click's usage errors (typer vendors click in recent versions): one line, as every other error
        where = exc.ctx.command_path if getattr(exc, "ctx", None) else "perfaudit"
        if exc.format_message():  # (no arguments at all: the help was printed, nothing to add)
            err.print(f"[bold red]perfaudit: error:[/] {exc.format_message()} (`{where} -h` for help)",
                      markup=True, highlight=False)
        sys.exit(exc.exit_code)
    sys.exit(code or 0)


if __name__ == "__main__":
    main()
