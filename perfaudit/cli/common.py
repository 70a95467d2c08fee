"""What the commands share: the typer app, the consoles, the options declared once, turning errors
into one line and an exit code, and printing a finished report."""
from __future__ import annotations

import functools
import os
import shlex
import sys
import time
import traceback
from enum import Enum
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from .. import __version__, api
from ..errors import EXIT_FINDINGS, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_SCRIPT_FAILED, PerfauditError
from ..report import console as console_report
from ..report import outputs

_HELP = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings=_HELP, rich_markup_mode=None,
                  help="Audit PyTorch training performance: ranked, located, costed fixes.")


class _Stdout(Console):
    """Standard output. When its reader leaves (`| head`), rich exits with 1 by default; here the
    BrokenPipeError goes on to the command, which stops writing and keeps its own exit code."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


out = _Stdout(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class FailOn(str, Enum):
    info = "info"
    warning = "warning"
    error = "error"
    never = "never"


class Format(str, Enum):
    console = "console"
    json = "json"


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
TargetOpt = Annotated[Optional[str], typer.Option(
    "--target", help="Project the measured steps onto this GPU and rank the fixes by their cost there (H100 SXM, "
                     "h100-pcie, H200, B200, A100, A10, L4, T4, V100, MI300X, MI250X …; an unknown name lists "
                     "them). Default: the GPU the run used; a CPU run of a script with a CUDA path: the "
                     "config's `target`, else H100 SXM. none: no projection.")]
FormatChoiceOpt = Annotated[Format, typer.Option("--format", help="Output format.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress line on stderr while the script runs.")]
ScriptArg = Annotated[str, typer.Argument(help="The training script, run as `python SCRIPT ARGS`.")]
ArgsArg = Annotated[Optional[list[str]], typer.Argument(help="Arguments for the script, after `--`.")]

_state = {"debug": False}


def say_error(message: str, code: int) -> None:
    """One line on stderr (paths and ids may hold `[`: never read as markup), then exit."""
    err.print(f"[bold red]perfaudit: error:[/] {escape(message)}", markup=True, highlight=False)
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
            if _state["debug"]:
                traceback.print_exception(exc)
            say_error(str(exc), exc.exit_code)
        except KeyboardInterrupt:
            err.print("perfaudit: interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as exc:  # a bug in perfaudit: one line, the traceback with --debug
            if _state["debug"]:
                traceback.print_exception(exc)
            say_error(f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", EXIT_INTERNAL)
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


def command_line() -> str:
    return "perfaudit " + shlex.join(sys.argv[1:])


def stdout_gone() -> None:
    """The reader of our output went away (`| head`): stop writing, keep the exit code meaningful."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


class Reporting:
    """A reporting command's settings and report destinations, checked before anything runs."""

    def __init__(self, config, rules_dir, select, ignore, formats, output, baseline, baseline_write,
                 protected: tuple[str, ...] = ()):
        self.specs = outputs.parse_formats(formats, output)
        outputs.check_writable([path for _, path in self.specs if path] + ([baseline_write] if baseline_write else []),
                               protected)
        self.settings = api.prepare(config, rules_dir, select, ignore, baseline, baseline_write)

    @property
    def rules(self):
        return self.settings.rules

    def finish(self, report, fail_on: Optional[FailOn], verbose: bool, extra_exit: int | None = None,
               needs_training: bool = False):
        """Print and write the report, then exit: `extra_exit` (the script failed, the run was
        interrupted) wins over the gate; perfaudit's own error in the audited process exits 4."""
        level = self.settings.fail_on(fail_on.value if fail_on else None)
        failed = api.gate_fails(report, level, needs_training, self.settings.config.allow_no_training)
        report.command = command_line()
        emit(report, self.specs, self.settings.all_rules, verbose)
        write_error = (report.outcome or {}).get("write_error")
        if write_error and extra_exit is None:  # the run folder filled up, say: what was seen is above
            from ..errors import UsageError
            raise UsageError(f"{write_error}: the report above is what was measured before it; free some space "
                             "or choose another --out-dir")
        if extra_exit is None and report.internal_errors:
            extra_exit = EXIT_INTERNAL
        raise typer.Exit(extra_exit if extra_exit is not None else EXIT_FINDINGS if failed else EXIT_OK)


def emit(report, specs, rules, verbose: bool = False) -> None:
    """Standard output first (one format, or the console report), then each file: a file that cannot
    be written loses nothing else."""
    to_stdout = [fmt for fmt, path in specs if path is None and fmt != "console"]
    try:
        for fmt in to_stdout:
            text = outputs.render(report, fmt, rules)
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
        if ("console", None) in specs or not to_stdout:
            console_report.render(report, out, verbose)
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_gone()
    failed = outputs.write_files(report, specs, rules)
    if failed:
        from ..errors import UsageError
        raise UsageError("; ".join(failed))


def exit_code_of_run(report) -> int | None:
    """A run's own exit code, before the gate: interrupted (128 + signal), the script failed (3)."""
    if report.stop_signal:
        return 128 + report.stop_signal
    if report.script_failed:
        return EXIT_SCRIPT_FAILED
    return None


class _Silent:
    """A progress line that says nothing (--quiet)."""

    def update(self, *args, **kwargs) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def status(text: str, quiet: bool):
    """The progress line on stderr: only on a terminal (rich stays silent otherwise), never with --quiet."""
    return _Silent() if quiet else err.status(escape(text))


def progress(status_line, script: str):
    """The progress line's text from the child's progress records: what it is doing, and for how long."""
    started = time.monotonic()
    state: dict[str, Any] = {"text": f"starting {script} …", "waiting": True}

    def update(event: dict) -> None:
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
        elif phase == "timing_plain":
            state["text"] = f"{script}: timing {event.get('steps')} more steps without the profiler"
        elif phase == "exporting":
            state["text"] = f"{script}: writing the trace"
        elif phase == "done":
            state["text"] = "analysing the trace"
        elif phase == "cpu_branch":
            state["waiting"] = True
            state["text"] = f"{script}: {event.get('why')}; running its CPU branch"
        elapsed = time.monotonic() - started
        status_line.update(escape(state["text"] + (f" ({elapsed:.0f} s)" if state["waiting"] else " …")))
    return update
