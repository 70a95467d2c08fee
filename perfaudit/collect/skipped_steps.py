"""A step GradScaler skips is still a training step. Under float16 autocast the scaler skips `optimizer.step()`
when the gradients overflowed (the first steps, while it lowers its scale, and now and then after each growth):
no optimizer step, so the step detector, which ends a step at each, merged that iteration into the next (a
measured step holding two iterations: twice the time, every convolution twice). The scaler's step now tells the
detector that the optimizer it skipped stepped, without reading anything more from the device."""
from __future__ import annotations

from collections.abc import Callable

from .wrap import on_undo, patch


def watch_skipped_steps(torch, skipped: Callable[[object], None]) -> None:
    """`skipped(optimizer)` after each `GradScaler.step(optimizer)` that did not step it."""
    scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
    original = getattr(scaler, "_maybe_opt_step", None)
    if original is None:
        return
    from torch.optim.optimizer import register_optimizer_step_post_hook
    stepped = [0]   # optimizer steps taken, whichever optimizer

    def count(opt, args, kwargs):
        stepped[0] += 1
    on_undo(register_optimizer_step_post_hook(count).remove)

    def maybe_opt_step(self, optimizer, *args, **kwargs):
        before = stepped[0]
        out = original(self, optimizer, *args, **kwargs)
        if stepped[0] == before:
            skipped(optimizer)
        return out

    patch(scaler, "_maybe_opt_step", maybe_opt_step)
