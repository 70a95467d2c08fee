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
from types import FrameType

try:
    from transformers import Trainer, TrainerCallback
except ImportError as exc:
    raise ImportError("perfaudit.integrations.transformers needs transformers: "
                      "pip install 'perfaudit[transformers]'") from exc

from ._common import AuditedTraining

__all__ = ["PerfauditCallback"]


def _calling_trainer() -> Trainer | None:
    """The Trainer whose loop calls this callback: the callback API passes everything but it."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back
    return None


class PerfauditCallback(AuditedTraining, TrainerCallback):
    def __init__(self, steps: int | None = None, warmup: int | None = None, out_dir: str | None = None,
                 fail_on: str | None = None, action: str = "warn", config: str | None = None,
                 quiet: bool = False):
        self._set_up("transformers", steps, warmup, out_dir, fail_on, action, config, quiet)

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self._start()

    def on_step_end(self, args, state, control, **kwargs):
        self._finish(self.audit.step_ended(), _log)

    def on_prediction_step(self, args, state, control, **kwargs):
        self.audit.evaluating()  # evaluation inside a training step: not measured like the others

    def on_evaluate(self, args, state, control, **kwargs):
        self.audit.evaluating()

    def on_train_end(self, args, state, control, **kwargs):
        self._finish(self.audit.end(), _log)


def _log(figures: dict) -> None:
    """Through Trainer.log, so that every `report_to` integration gets the figures."""
    trainer = _calling_trainer()
    if trainer is not None:
        trainer.log(figures)
