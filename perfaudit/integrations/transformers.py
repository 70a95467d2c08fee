"""`PerfauditCallback` for Hugging Face's Trainer (`pip install perfaudit[transformers]`).

    from transformers import Trainer, TrainingArguments
    from perfaudit.integrations.transformers import PerfauditCallback

    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[PerfauditCallback(steps=5)])
    trainer.train()

The callback profiles a bounded window of `train()`'s optimization steps (a step ends at `on_step_end`,
after the optimizer stepped, so a step holds all its gradient-accumulation micro-batches; a step that ran
evaluation is left out and another recorded in its place), runs every rule, prints the report, writes
the run folder (report.html, report.json, the trace), logs the figures through `Trainer.log` (so they
reach every `report_to` integration: `perfaudit/step_ms`, `perfaudit/<RULE>_ms_per_step` …), and then
either warns (`action="warn"`) or stops the training with `GateFailed` when a finding reaches `fail_on`
(`action="fail"`). Training goes on after the window without perfaudit's hooks. Only the main process
(world process zero) records. Under `perfaudit run` the callback stands aside: the run records.
"""
from __future__ import annotations

import sys
import warnings

try:
    from transformers import Trainer, TrainerCallback
except ImportError as exc:
    raise ImportError("perfaudit.integrations.transformers needs transformers: "
                      "pip install 'perfaudit[transformers]'") from exc

from .. import api
from ._common import show

__all__ = ["PerfauditCallback"]


def _calling_trainer() -> Trainer | None:
    """The Trainer whose loop calls this callback: the callback API passes everything but it."""
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back
    return None


class PerfauditCallback(TrainerCallback):
    def __init__(self, steps: int | None = None, warmup: int | None = None, out_dir: str | None = None,
                 fail_on: str | None = None, action: str = "warn", config: str | None = None,
                 quiet: bool = False):
        self.audit = api.WindowAudit("transformers", steps=steps, warmup=warmup, out_dir=out_dir,
                                     fail_on=fail_on, action=action, config=config)
        self.quiet = quiet
        self.report = None  # the report, once the window closed
        if not quiet:
            self.audit.on_report = show

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        if not self.audit.start() and not self.quiet:
            print(f"perfaudit: the callback stands aside: {self.audit.standing_aside}", file=sys.stderr)

    def on_step_end(self, args, state, control, **kwargs):
        self._done(self.audit.step_ended())

    def on_prediction_step(self, args, state, control, **kwargs):
        self.audit.evaluating()  # evaluation inside a training step: not measured like the others

    def on_evaluate(self, args, state, control, **kwargs):
        self.audit.evaluating()

    def on_train_end(self, args, state, control, **kwargs):
        self._done(self.audit.end())

    def _done(self, report) -> None:
        if report is None:
            return
        self.report = report
        if not self.quiet:
            show(report)
        trainer = _calling_trainer()
        if trainer is not None:
            try:
                trainer.log(api.metrics(report))
            except Exception as exc:  # a reporting integration that refuses a metric must not stop training
                warnings.warn(f"perfaudit: could not log the figures: {exc}", stacklevel=2)
        if self.audit.fails():
            summary = f"perfaudit: findings at or above '{self.audit.fail_level}' (report: {report.run_dir})"
            if self.audit.action == "fail":
                raise api.GateFailed(summary)
            warnings.warn(summary, stacklevel=2)
