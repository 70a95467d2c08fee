"""What both callbacks share: the audit they drive, standing aside when `perfaudit run` records, and what
happens once a report is made (printed, its figures logged the framework's way, the gate applied)."""
from __future__ import annotations

import sys
import warnings
from collections.abc import Callable

from .. import api
from ..report import console as console_report


def show(report) -> None:
    """The report, as `perfaudit run` prints it, on stderr (the training's own output stays on stdout)."""
    from rich.console import Console
    console_report.render(report, Console(file=sys.stderr))


class AuditedTraining:
    """Mixed into a framework's callback class: `self.audit` (usecases/inprocess.py's WindowAudit)."""

    def _set_up(self, source: str, steps: int | None, warmup: int | None, out_dir: str | None,
                fail_on: str | None, action: str, config: str | None, quiet: bool) -> None:
        self.audit = api.WindowAudit(source, steps=steps, warmup=warmup, out_dir=out_dir, fail_on=fail_on,
                                     action=action, config=config)
        self.quiet = quiet
        self.report = None  # the report, once made
        if not quiet:
            self.audit.on_report = show  # a report made at the process's exit (training ended early)

    def _start(self) -> None:
        if not self.audit.start() and not self.quiet:
            print(f"perfaudit: the callback stands aside: {self.audit.standing_aside}", file=sys.stderr)

    def _finish(self, report, log: Callable[[dict], None], failing: bool = False) -> None:
        """A report was made: print it, log its figures with `log`, and warn or stop at the gate (not
        when the training is failing already)."""
        if report is None:
            return
        self.report = report
        if not self.quiet:
            show(report)
        try:
            log(api.metrics(report))
        except Exception as exc:  # a logger that refuses a metric must not stop the training
            warnings.warn(f"perfaudit: could not log the figures: {exc}", stacklevel=3)
        if self.audit.fails() and not failing:
            summary = f"perfaudit: findings at or above '{self.audit.fail_level}' (report: {report.run_dir})"
            if self.audit.action == "fail":
                raise api.GateFailed(summary)
            warnings.warn(summary, stacklevel=3)
