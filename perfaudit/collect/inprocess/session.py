"""The session inside the user's own process, for the framework callbacks and the notebook magic.

`perfaudit run` starts the script in a child process and owns it; here the script (Lightning's
Trainer.fit, Hugging Face's Trainer.train, a notebook cell) owns the process and perfaudit only watches a
bounded window of it. The session is the same (probes, sizing, budgets, busy steps, export); what
differs: the framework's hooks mark where a step ends (`step_ended`), training goes on after the window
(nothing is raised into it), the script keeps its signal handlers and its thread count, and only the
process of rank 0 records (one run folder, as `perfaudit run` writes).
"""
from __future__ import annotations

import json
import os

from ...outcome import Outcome
from ..run.options import RunOptions, RunResult
from ..run.rundir import finish_run_dir, make_run_dir
from ..window.session import Session, running_session
from ..window.steps import StepDetector
from ..wrap import undo_patches


def active_session() -> Session | None:
    """The session already recording this process (`perfaudit run`'s, another callback's), if any."""
    return running_session()


class FrameworkSteps(StepDetector):
    """Step boundaries come from the framework's hooks: what the script does only counts optimizers."""

    def __init__(self, source: str):
        super().__init__(lambda: None)
        self.source = source

    def closure_step(self) -> None:
        pass

    def optimizer_stepped(self, key) -> None:
        pass

    def backward_done(self) -> None:
        pass

    def _weak(self, source: str) -> None:
        pass


class InProcessSession(Session):
    owns_signals = False
    fits_threads = False
    samples_startup = False
    counts_flops = False  # the user's model goes on training: no extra step through it
    times_plain_steps = False  # nor three more steps after the window

    def __init__(self, options: RunOptions, script: str, source: str | None):
        """`source`: the framework whose hooks mark the steps ("lightning", "transformers"); None: the
        steps are found as `perfaudit run` finds them (a notebook cell), and the window ends the code it
        runs (WindowDone) unless `options.full`."""
        run_dir = make_run_dir(options.out_dir, options.keep_runs)
        config = {"run_dir": run_dir, "warmup": options.warmup, "steps": options.steps,
                  "full": options.full or source is not None,
                  "with_stack": options.with_stack, "record_shapes": options.record_shapes,
                  "record_budget_s": options.record_budget_s, "trace_budget_mb": options.trace_budget_mb,
                  "device": "cpu", "mode": "profile", "source_roots": [os.path.dirname(script), os.getcwd()]}
        super().__init__(config, script)
        if source is not None:
            self.detector = FrameworkSteps(source)

    def _launched_rank(self) -> int | None:
        return None  # the callbacks record on rank 0 only: one run folder, named as `perfaudit run`'s

    def start(self) -> None:
        if active_session() is not None:
            raise RuntimeError("perfaudit is already recording this process")
        self.install()
        self._say("running")

    # -- what the framework's hooks say ------------------------------------------------------------------
    def step_ended(self) -> None:
        """A training step ended (after its optimizer step): its boundary is here."""
        if self.window_closed or self.finished:
            return
        self.pending = True
        self.flush()

    def evaluating(self) -> None:
        """Validation or evaluation runs in the current step: it is not measured like the others."""
        self.marks.flags.add("eval")

    def end(self, result: dict | None = None) -> None:
        """The training ended (or failed, `result` says how): what was recorded is written."""
        if self.finished:
            return
        try:
            self.finish(result or {"outcome": Outcome.COMPLETED})
        finally:
            undo_patches()  # the process goes on as it was before the session
            self._progress.close()
            finish_run_dir(self.run_dir)

    @property
    def done(self) -> bool:
        return self.window_closed


def recorded(session: InProcessSession) -> RunResult:
    """What the session left in its run folder, as `perfaudit run`'s runner reads a child's."""
    outcome: dict = {}
    try:
        with open(os.path.join(session.run_dir, "result.json")) as f:
            outcome = json.load(f)
    except (OSError, ValueError):
        outcome = {"outcome": Outcome.INTERNAL_ERROR, "message": "the session wrote no result"}
    probes = outcome.pop("probes", {}) or {}
    trace = outcome.pop("trace", None)
    return RunResult(os.path.abspath(session.script), session.run_dir,
                     trace if trace and os.path.exists(trace) else None, outcome,
                     os.path.join(session.run_dir, "script.log"), probes)
