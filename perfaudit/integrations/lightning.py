"""`PerfauditCallback` for Lightning (`pip install perfaudit[lightning]`).

    import lightning as L
    from perfaudit.integrations.lightning import PerfauditCallback

    trainer = L.Trainer(max_epochs=3, callbacks=[PerfauditCallback(steps=5, fail_on="warning")])
    trainer.fit(model, datamodule)

The callback profiles a bounded window of `fit()`'s training steps (a step ends at
`on_train_batch_end`; a step that ran validation or sanity checking is left out and another recorded in
its place), runs every rule, prints the report, writes the run folder (report.html, report.json, the
trace), logs the figures to the trainer's loggers (`perfaudit/step_ms`, `perfaudit/<RULE>_ms_per_step`
…), and then either warns (`action="warn"`, the default) or stops the run with `GateFailed` when a finding
reaches `fail_on` (`action="fail"`). Training goes on after the window without perfaudit's hooks. Only the
process of global rank 0 records. Under `perfaudit run` the callback stands aside: the run records.
"""
from __future__ import annotations

import sys
import warnings

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    try:
        from pytorch_lightning.callbacks import Callback
    except ImportError as exc:
        raise ImportError("perfaudit.integrations.lightning needs Lightning: pip install 'perfaudit[lightning]'") from exc

from .. import api
from ._common import show

__all__ = ["PerfauditCallback"]


class PerfauditCallback(Callback):
    def __init__(self, steps: int | None = None, warmup: int | None = None, out_dir: str | None = None,
                 fail_on: str | None = None, action: str = "warn", config: str | None = None,
                 quiet: bool = False):
        self.audit = api.WindowAudit("lightning", steps=steps, warmup=warmup, out_dir=out_dir,
                                     fail_on=fail_on, action=action, config=config)
        self.quiet = quiet
        self.report = None  # the report, once the window closed
        if not quiet:
            self.audit.on_report = show

    # -- the window ------------------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        # before Lightning builds the optimizers and the DataLoaders of fit(), so the probes see them built
        if stage != "fit" or not trainer.is_global_zero:
            return
        if not self.audit.start() and not self.quiet:
            print(f"perfaudit: the callback stands aside: {self.audit.standing_aside}", file=sys.stderr)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._done(trainer, self.audit.step_ended())

    def on_validation_start(self, trainer, pl_module) -> None:
        self.audit.evaluating()  # the sanity check and validation: not a training step

    def on_fit_end(self, trainer, pl_module) -> None:
        self._done(trainer, self.audit.end())

    def on_exception(self, trainer, pl_module, exception) -> None:
        if isinstance(exception, api.GateFailed):
            return
        report = self.audit.failed(exception)
        if report is not None:
            self._done(trainer, report, failing=True)

    # -- the report ------------------------------------------------------------------------------------
    def _done(self, trainer, report, failing: bool = False) -> None:
        if report is None:
            return
        self.report = report
        if not self.quiet:
            show(report)
        figures = api.metrics(report)
        for logger in getattr(trainer, "loggers", None) or []:
            try:
                logger.log_metrics(figures, step=trainer.global_step)
            except Exception as exc:  # a logger that refuses a metric must not stop the training
                warnings.warn(f"perfaudit: could not log to {type(logger).__name__}: {exc}", stacklevel=2)
        if self.audit.fails() and not failing:
            summary = f"perfaudit: findings at or above '{self.audit.fail_level}' (report: {report.run_dir})"
            if self.audit.action == "fail":
                raise api.GateFailed(summary)
            warnings.warn(summary, stacklevel=2)
