"""An audit inside the user's own training process: what the Lightning and Hugging Face callbacks and
the notebook magic share. The framework's hooks say where a step ends; the session (collect/inprocess/session.py)
records a bounded window of them; when it closes, the window is analysed here as `perfaudit run` would
analyse it (the same rules, the static pass over the script, the configuration and gate), the run folder
gets report.html and report.json, and the training goes on, untouched: perfaudit's hooks are removed.

    audit = WindowAudit(source="lightning", steps=5)
    if audit.start():                # False when `perfaudit run` already records this process
        ...
        report = audit.step_ended()  # after each training step: the report once the window closes
    report = audit.end()             # at the end of training (a window cut short still reports)
"""
from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable
from dataclasses import replace

from ..collect.inprocess.notebook import NotebookScript, relocate
from ..collect.inprocess.session import InProcessSession, active_session, recorded
from ..collect.userframes import raised
from ..collect.window.session import WindowDone
from ..errors import UsageError
from ..findings import Report
from ..outcome import Outcome
from ..policy.gate import gate_fails
from .audit import report_for_run, write_run_reports
from .settings import prepare, run_options

ACTIONS = ("warn", "fail")


class GateFailed(RuntimeError):
    """The audit found what the gate fails on, and the callback was asked to fail the run."""


def main_script() -> str | None:
    """The script being run (`python train.py`): the static pass reads it; None in a REPL or notebook."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return os.path.abspath(path) if path and os.path.isfile(path) else None


def _profiler_on() -> bool:
    """Whether a torch profiler records now (a `with torch.profiler.profile()` of the user's around the
    training): a second one would take its events."""
    import torch
    try:
        return bool(torch._C._autograd._profiler_enabled())
    except AttributeError:  # an older torch: its module-level flag
        return bool(getattr(torch.autograd.profiler, "_is_profiler_enabled", False))


class WindowAudit:
    def __init__(self, source: str | None, steps: int | None = None, warmup: int | None = None,
                 out_dir: str | None = None, fail_on: str | None = None, action: str = "warn",
                 config: str | None = None, script: str | None = None, full: bool = False):
        if action not in ACTIONS:
            raise UsageError(f"action: expected one of {', '.join(ACTIONS)}, not {action!r}")
        self.source = source
        self.settings = prepare(config)
        self.options = run_options(self.settings, warmup=warmup, steps=steps, out_dir=out_dir, full=full)
        self.fail_level = self.settings.fail_on(fail_on)
        self.action = action
        self.script = script
        self.session: InProcessSession | None = None
        self.report: Report | None = None
        self.standing_aside: str | None = None  # why this audit records nothing
        self.on_report = None  # called with a report made at the process's exit (training ended early)

    def start(self) -> bool:
        """Install the session; False (and `standing_aside` says why) when another one records already."""
        if self.session is not None:
            return True
        if active_session() is not None:
            self.standing_aside = "perfaudit already records this process (perfaudit run)"
            return False
        if _profiler_on():
            self.standing_aside = ("a torch profiler is already recording this process (the script's own): "
                                   "perfaudit leaves it the trace")
            return False
        self.script = self.script or main_script() or os.path.join(os.getcwd(), "<interactive>")
        self.session = InProcessSession(self.options, self.script, self.source)
        self.session.start()
        # a training that raises past the framework (no hook of its own said so) still leaves its report
        atexit.register(self._at_exit)
        previous = sys.excepthook

        def excepthook(kind, value, tb):
            self._uncaught = self._uncaught or value
            previous(kind, value, tb)
        sys.excepthook = excepthook
        self._hooks = (excepthook, previous)
        return True

    _hooks: tuple | None = None

    def _unhook(self) -> None:
        """The report is made: the exit and exception hooks go (a notebook audits many cells)."""
        atexit.unregister(self._at_exit)
        if self._hooks is not None and sys.excepthook is self._hooks[0]:
            sys.excepthook = self._hooks[1]
        self._hooks = None

    _uncaught: BaseException | None = None

    def _at_exit(self) -> None:
        if not self.recording:
            return
        result = (describe_exception(self._uncaught) if self._uncaught is not None else
                  {"outcome": Outcome.EXITED, "exit_code": 0,
                   "message": "the process ended before the training's end hook ran"})
        report = self.end(result)
        if report is not None and self.on_report is not None:
            self.on_report(report)

    def failed(self, exc: BaseException) -> Report | None:
        """The training raised `exc` (the framework's exception hook): the report on what was recorded."""
        return self.end(describe_exception(exc))

    @property
    def recording(self) -> bool:
        return self.session is not None and self.report is None

    def step_ended(self) -> Report | None:
        """A training step ended; the report, once, when this step closed the window."""
        session = self._live()
        if session is None:
            return None
        session.step_ended()
        return self._report() if session.done else None

    def evaluating(self) -> None:
        session = self._live()
        if session is not None:
            session.evaluating()

    def _live(self) -> InProcessSession | None:
        """The session while it records; None before it starts and once the report is made."""
        return self.session if self.report is None else None

    def end(self, result: dict | None = None) -> Report | None:
        """Training ended (or failed: `result` says how, as outcome.py does); the report on what was
        recorded, unless it was made already."""
        if not self.recording:
            return None
        return self._report(result or {"outcome": Outcome.COMPLETED})

    def _report(self, result: dict | None = None) -> Report:
        session = self._live()
        assert session is not None, "a report is made once, from a session that recorded"
        self._unhook()
        session.end(result or {"outcome": Outcome.WINDOW_COMPLETE})
        run = recorded(session)
        script = run.script
        self.report = report_for_run(run, script, self.options, self.settings.rules, self.settings.gate,
                                     command=f"{self.source} callback" if self.source else "%%perfaudit",
                                     write=self.relocate is None)
        if self.relocate is not None:  # a cell's findings, back at the cell's lines
            self.report = self.relocate(self.report)
            write_run_reports(self.report, self.settings.rules)
        return self.report

    relocate: Callable[[Report], Report] | None = None  # the findings put back where the user wrote them (a cell)

    def fails(self) -> bool:
        """Whether the report fails the configured gate (`fail_on`, else perfaudit.toml's fail-on)."""
        return self.report is not None and gate_fails(self.report, self.fail_level)


def describe_exception(exc: BaseException) -> dict:
    """A training that failed, as `perfaudit run` describes a script that failed (outcome.py)."""
    if isinstance(exc, KeyboardInterrupt):
        return {"outcome": Outcome.INTERRUPTED, "by": "SIGINT"}
    return raised(exc)


def metrics(report: Report) -> dict[str, float]:
    """The report's figures as flat metrics for a trainer's loggers: the step, its phases, each rule's
    estimated saving (ms per step) and the count of findings."""
    out: dict[str, float] = {"perfaudit/findings": float(len(report.findings))}
    if report.traces:
        first = report.traces[0]
        if isinstance(first.step_ms, (int, float)):  # None when no step could be timed (all disturbed)
            out["perfaudit/step_ms"] = round(first.step_ms, 4)
        for phase, ms in (first.breakdown or {}).items():
            if isinstance(ms, (int, float)) and phase != "total":
                out[f"perfaudit/host_{phase}_ms"] = round(ms, 4)
    for finding in report.findings:
        saving = finding.saving_ms if isinstance(finding.saving_ms, (int, float)) else None
        key = f"perfaudit/{finding.rule}_ms_per_step"
        if saving is not None and key not in out:
            out[key] = round(saving, 4)
    return out


class _CellScript(NotebookScript):
    """One cell run by the magic: its places are named as IPython names them ("Cell In[5]")."""

    def label(self, cell: int) -> str:
        return self.notebook


def audit_cell(code: str, namespace: dict, label: str, first_line: int, audit: WindowAudit
               ) -> tuple[Report | None, BaseException | None]:
    """Run a notebook cell's code (already plain Python) in `namespace` under `audit`, as `perfaudit
    run` runs a script: the steps found from what it does, the window ending the cell unless the audit
    asked for the full run. The findings point at `label` (IPython's "Cell In[5]"), its lines counted
    from `first_line`. Returns the report and the exception the cell raised, if it did (the caller
    shows the report, then raises it)."""
    if not audit.start() or audit.session is None:
        return None, None
    session = audit.session
    path = os.path.join(session.run_dir, "cell.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(code)
    audit.script = session.script = path
    n_lines = code.count("\n") + 1
    cell = _CellScript(label, path, [(0, first_line + i) for i in range(n_lines)])
    audit.relocate = lambda report: replace(report, findings=relocate(report.findings, cell), script=label)
    error = None
    try:
        exec(compile(code, path, "exec"), namespace)  # noqa: S102 - the user's own cell, as IPython runs it
        result = {"outcome": Outcome.COMPLETED}
    except WindowDone:
        result = {"outcome": Outcome.WINDOW_COMPLETE}
    except BaseException as exc:  # noqa: BLE001 - reported, then raised again by the caller
        result, error = describe_exception(exc), exc
    return audit.end(result), error
