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

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    try:
        from pytorch_lightning.callbacks import Callback
    except ImportError as exc:
        raise ImportError("perfaudit.integrations.lightning needs Lightning: pip install 'perfaudit[lightning]'") from exc

from .. import api
from ._common import AuditedTraining

__all__ = ["PerfauditCallback"]


class PerfauditCallback(AuditedTraining, Callback):
    def __init__(self, steps: int | None = None, warmup: int | None = None, out_dir: str | None = None,
                 fail_on: str | None = None, action: str = "warn", config: str | None = None,
                 quiet: bool = False):
        self._set_up("lightning", steps, warmup, out_dir, fail_on, action, config, quiet)

    def setup(self, trainer, pl_module, stage: str) -> None:
        # before Lightning builds the optimizers and the DataLoaders of fit(), so the probes see them built
        if stage == "fit" and trainer.is_global_zero:
            self._start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._finish(self.audit.step_ended(), self._logger_of(trainer))

    def on_validation_start(self, trainer, pl_module) -> None:
        self.audit.evaluating()  # the sanity check and validation: not a training step

    def on_fit_end(self, trainer, pl_module) -> None:
        self._finish(self.audit.end(), self._logger_of(trainer))

    def on_exception(self, trainer, pl_module, exception) -> None:
        if not isinstance(exception, api.GateFailed):
            self._finish(self.audit.failed(exception), self._logger_of(trainer), failing=True)

    @staticmethod
    def _logger_of(trainer):
        def log(figures: dict) -> None:
            for logger in getattr(trainer, "loggers", None) or []:
                logger.log_metrics(figures, step=trainer.global_step)
        return log
