"""Which recorded steps are training steps like the others, and whether the trace stays within budget.

A step in which the model was switched to eval mode (an evaluation pass, a text-generation callback),
batches came from another DataLoader than the training one, or the training loader started a new
epoch is unlike the steps around it: it may not size the trace budget, it is left out of the measured
steps (said in the report), and the window records one more step in its place (at most as many extra
steps as were asked for). A step cut short by a signal is left out too.

The trace's size is projected step by step from the sized step's estimate, scaled by each step's CPU
time against the first recorded step's: a window whose later steps turn out heavier than the sized
one closes before it writes far more than the budget."""
from __future__ import annotations

import time

from .internal import guarded
from .wrap import wrap

REASONS = {"eval": "the model was switched to eval mode in it (an evaluation pass?)",
           "other_loader": "it read batches from another DataLoader (evaluation?)",
           "epoch": "the training DataLoader started a new epoch in it",
           "cut": "it was cut short when the run was stopped"}


class StepMarks:
    def __init__(self, session):
        self.session = session
        self.flags: set[str] = set()          # of the step running now
        self.loaders: set = set()             # loaders read in the step running now
        self.training_loaders: set = set()    # read in the sized step
        self.excluded: dict[int, str] = {}
        self.extra_steps = 0
        self.mb_per_step: float | None = None
        self._cpu: list[float] = []           # CPU seconds of each closed window step
        self._cpu_at_open = None
        self._eval_depth = 0

    # -- what the script does ------------------------------------------------------------------------
    def install(self) -> None:
        import torch
        marks = self

        def train(args, kwargs):
            mode = args[1] if len(args) > 1 else kwargs.get("mode", True)
            if mode is False:
                marks._note("eval")

        wrap(torch.nn.Module, "train", train, probe="step marks")

    def _note(self, flag: str) -> None:
        if self.session.steps_ended >= 1:  # before the first step ended nothing is being measured
            self.flags.add(flag)

    @guarded("step marks")
    def batch(self, loader_id) -> None:
        if loader_id is None:
            return
        self.loaders.add(loader_id)
        if self.training_loaders and loader_id not in self.training_loaders:
            self._note("other_loader")

    @guarded("step marks")
    def new_epoch(self, loader_id) -> None:
        if loader_id in self.training_loaders:
            self._note("epoch")

    # -- sizing ---------------------------------------------------------------------------------------
    def sizing_started(self) -> None:
        self.flags, self.loaders = set(), set()

    def sizing_unlike_training(self) -> bool:
        """Whether the sized step was unlike a training step; if not, its loaders are the training ones."""
        unlike = bool(self.flags - {"other_loader"})
        if not unlike:
            self.training_loaders = set(self.loaders)
        return unlike

    # -- the window -----------------------------------------------------------------------------------
    def window_started(self) -> None:
        self.flags, self.loaders = set(), set()

    def step_opened(self, index: int) -> None:
        self.flags, self.loaders = set(), set()
        self._cpu_at_open = time.process_time()

    def step_closed(self, index: int, measured: bool) -> bool:
        """True when the measured step that just closed is left out and the window should record one more."""
        if self._cpu_at_open is not None:
            self._cpu.append(time.process_time() - self._cpu_at_open)
        flags = sorted(self.flags)
        if not flags or not measured:
            return False
        self.excluded[index] = REASONS[flags[0]]
        if self.extra_steps < self.session.config["steps"]:
            self.extra_steps += 1
            return True
        return False

    def cut_short(self, index: int) -> None:
        self.excluded[index] = REASONS["cut"]

    def over_trace_budget(self, budget_mb: float | None) -> bool:
        """Whether the steps recorded so far project past the trace budget."""
        if not budget_mb or not self.mb_per_step or len(self._cpu) < 2 or self._cpu[0] <= 0:
            return False
        projected = self.mb_per_step * sum(c / self._cpu[0] for c in self._cpu)
        return projected > budget_mb

    def summary(self) -> dict:
        return {"excluded_steps": {str(i): why for i, why in self.excluded.items()}, "extra_steps": self.extra_steps,
                "step_cpu_s": [round(c, 4) for c in self._cpu]}
