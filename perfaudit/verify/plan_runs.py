"""One run of a plan (`perfaudit plan`: batch_plan.py, checkpoint_plan.py): the script run with the plan's
change, its trace read, and what its step held on the device (measured on a GPU, else the emulated device's
estimate); or why the run says nothing (NoRun: stopped, out of memory, no step, no device memory)."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from ..collect.run.options import RunOptions
from ..collect.run.runner import run_script
from ..errors import TraceError
from ..facts import Context
from ..facts.registry import Missing
from ..trace import load_trace
from .stops import signal_name

MARGIN = 0.10   # of the GPU's memory a plan leaves free (the 10 %)


def usable_bytes(device_total: int, context: int, budget: int | None) -> float:
    """Bytes a plan's step may reserve: the user's budget, else the GPU's memory less its CUDA context and MARGIN."""
    return float(budget) if budget else (1 - MARGIN) * device_total - context


class NoRun(Exception):
    """The run gave nothing to plan by: `why`, and the stop signal or the out-of-memory error that ended it."""

    def __init__(self, why: str, stop_signal: int | None = None, out_of_memory: bool = False):
        super().__init__(why)
        self.why, self.stop_signal, self.out_of_memory = why, stop_signal, out_of_memory


@dataclass
class Observed:
    ctx: Context
    memory: dict        # facts memory.measured or memory.emulated
    run_dir: str

    @property
    def cpu_step_ms(self) -> float | None:
        try:
            step = self.ctx.get("step.mean_ms")
        except Missing:
            return None
        return step if step and math.isfinite(step) else None


def observe(script: str, args: list[str], options: RunOptions, label: str, on_progress) -> Observed:
    """The script run with `options` (`label` names the run in what is said of it)."""
    result = run_script(script, args, options, on_progress)
    if result.stop_signal is not None:
        raise NoRun(f"interrupted ({signal_name(result.stop_signal)}) in the run {label}", result.stop_signal)
    if "OutOfMemory" in str(result.outcome.get("exception") or ""):
        raise NoRun(f"the run {label} ran out of memory", out_of_memory=True)
    if not result.trace_path:
        raise NoRun(f"the run {label} recorded no step "
                    f"({str(result.outcome.get('outcome') or 'no outcome').replace('_', ' ')})")
    try:
        trace = load_trace(result.trace_path, op_shapes=options.target != "none")
    except TraceError as exc:
        raise NoRun(f"the run {label} left an unreadable trace: {exc}") from None
    ctx = Context(trace, None, (os.path.dirname(result.script), os.getcwd()), target=options.target)
    for name in ("memory.measured", "memory.emulated"):
        try:
            memory = ctx.get(name)
        except Missing:
            continue
        if memory:
            return Observed(ctx, memory, result.run_dir)
    raise NoRun(f"the run {label} showed no device memory: the script's steps ran on no GPU, real or emulated "
                "(run it on its CUDA path)")
