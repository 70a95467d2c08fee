"""Which recorded steps are training steps like the others, and whether the trace stays within budget.

A step during which the process's threads waited for a CPU held by other processes for more than a
tenth of it (Linux says how long, clock.py) is disturbed, unless the script's own processes kept nearly
every CPU busy (its threads then waited for each other): on a busy machine one preempted thread of
the intra-op pool can stretch a 2 ms step to 40 ms, and an average over such steps says more about
the neighbours than about the script. It is left out the same way, and the window goes on (up to
BUSY_EXTRA times the steps asked for, and at least 20) to measure as many undisturbed steps as were asked for.

A step in which the model was switched to eval mode (an evaluation pass, a text-generation callback),
batches came from another DataLoader than the training one, or the training loader started a new
epoch is unlike the steps around it: it may not size the trace budget, it is left out of the measured
steps (said in the report), and the window records one more step in its place (at most as many extra
steps as were asked for). A step cut short by a signal is left out too. Under torchrun nothing is left out and no step is added:
every rank records the same steps, or their collectives would no longer pair up.

The trace's size is projected step by step from the sized step's estimate, scaled by each step's CPU
time against the first recorded step's: a window whose later steps turn out heavier than the sized
one closes before it writes far more than the budget."""
from __future__ import annotations

import time

from ..clock import disturbed, others_share, own_cpu, run_queue_wait_s, thread_wait_s, usable_cpus, waits_since
from ..internal import guarded
from ..wrap import wrap
from .sizing import MARGIN, Fit

REASONS = {"busy": "it waited {ms:.1f} ms of its {wall:.1f} ms for a CPU held by other processes (busy machine)",
           "eval": "the model was switched to eval mode in it (an evaluation pass?)",
           "other_loader": "it read batches from another DataLoader (evaluation?)",
           "epoch": "the training DataLoader started a new epoch in it (its workers started again)",
           "cut": "it was cut short when the run was stopped"}


BUSY_EXTRA = 6         # extra steps for disturbed ones, at most this many times the steps asked for (and 20)
BUSY_TIME_FACTOR = 2   # ... and while the window has taken less than this many times its undisturbed length


class StepMarks:
    def __init__(self, session):
        self.session = session
        self.flags: set[str] = set()          # of the step running now
        self.loaders: set = set()             # loaders read in the step running now
        self.training_loaders: set = set()    # read in the sized step
        self.excluded: dict[int, str] = {}
        self.extra_steps = 0
        self.sized: Fit | None = None  # the trace a step writes, with and without stacks, and the warm-up's (sizing.Fit)
        self._cpu: list[float] = []           # CPU seconds of each closed window step
        self._stacked: list[bool] = []        # each closed window step recorded with Python stacks
        self._cpu_at_open = None
        self._wall_at_open = None
        self._wait_at_open = None
        self._own_at_open: tuple[float, float] | None = None
        self._cpus = usable_cpus()
        self.self_contended = 0               # steps whose waits were among the script's own threads
        self.busy_extra = 0
        self.waited_ms: list[float] = []      # each window step's wait for a CPU
        self.fetch_waited_ms: list[float] = []  # its DataLoader fetches' wait, whoever held the CPU
        self.thread_waited_ms: list[float] = []  # the training thread's own (the sum counts every thread's)
        self._fetch_wait_at_open = 0.0
        self._thread_wait_at_open: float | None = None
        self._walls: list[float] = []         # each window step's wall time (s)
        self._window_t0 = time.perf_counter()
        others_share(own_cpu()[0], wanted=False)  # the machine's use from here on: a share over a quarter second by the window

    # -- what the script does ------------------------------------------------------------------------
    def install(self) -> None:
        import torch
        marks = self

        def train(args, kwargs):  # into eval mode, or back from it (an evaluation begun in an earlier step ended here)
            if (args[1] if len(args) > 1 else kwargs.get("mode", True)) is False or not getattr(args[0], "training", 1):
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
        """A new iterator of the training loader: a new epoch. Only one that starts worker processes
        again (workers, not persistent) makes its step unlike the others."""
        settings = (self.session.probes.loaders.get(loader_id) or {}).get("settings") or {}
        if loader_id in self.training_loaders and settings.get("num_workers") and not settings.get("persistent_workers"):
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
        self._window_t0 = time.perf_counter()
        # each fetch's own wait for a CPU: a step's wait lands where the scheduler's slices fell, and a fetch
        # shorter than a slice was most often not among them (the projection takes each part's own out)
        self.session.probes.wait_clock = thread_wait_s

    def window_closed(self) -> None:
        self.session.probes.wait_clock = None

    def step_opened(self, index: int) -> None:
        self.flags, self.loaders = set(), set()
        self._cpu_at_open = time.process_time()
        self._own_at_open = own_cpu()
        others_share(self._own_at_open[0], wanted=False)
        self._wall_at_open, self._wait_at_open = time.perf_counter(), run_queue_wait_s()
        self._fetch_wait_at_open = self.session.probes.fetch_wait_s
        self._thread_wait_at_open = thread_wait_s()

    def step_closed(self, index: int, measured: bool, stacked: bool = False) -> bool:
        """True when the measured step that just closed is left out and the window should record one more."""
        if self._cpu_at_open is not None:
            self._cpu.append(time.process_time() - self._cpu_at_open)
            self._stacked.append(stacked)
        busy = self._busy()
        flags = sorted(self.flags, key=list(REASONS).index)  # the most telling reason first
        if not measured or not (flags or busy):
            return False
        if self.session.rank is not None:  # the ranks of a job record the same steps: their collectives pair up
            return False
        if flags:
            self.excluded[index] = REASONS[flags[0]]
            if self.extra_steps < self.session.config["steps"]:
                self.extra_steps += 1
                return True
            return False
        assert busy is not None  # no flags: the step was left out for its waits
        self.excluded[index] = REASONS["busy"].format(ms=busy[0], wall=busy[1])
        if self.busy_extra < max(BUSY_EXTRA * self.session.config["steps"], 20) and self.busy_time_left():
            self.busy_extra += 1
            return True
        return False

    def _busy(self) -> tuple[float, float] | None:
        """(ms waited for a CPU, wall ms) of the step that just closed when it was disturbed."""
        if self._wall_at_open is None or self._wait_at_open is None:
            return None
        wall_ms = (time.perf_counter() - self._wall_at_open) * 1000.0
        every, others, now, _ = waits_since(self._wait_at_open, self._own_at_open, wall_ms / 1000.0, self._cpus)
        if now is None:
            return None
        self._walls.append(wall_ms / 1000.0)
        every_ms, waited_ms = every * 1000.0, others * 1000.0
        self.self_contended += every_ms > 0 and waited_ms == 0.0  # the script's own processes held the CPUs
        self.waited_ms.append(round(waited_ms, 3))
        # the training thread's own wait and its fetches', whoever held the CPU (its DataLoader workers and
        # intra-op threads too): the projection takes them out, as a GPU host gives each its own core
        fetch_ms = (self.session.probes.fetch_wait_s - self._fetch_wait_at_open) * 1000.0 if every_ms > 0 else 0.0
        self.fetch_waited_ms.append(round(min(max(fetch_ms, 0.0), every_ms), 3))
        thread_now = thread_wait_s() if every_ms > 0 else None
        thread_ms = (thread_now - self._thread_wait_at_open) * 1000.0 \
            if thread_now is not None and self._thread_wait_at_open is not None else waited_ms
        self.thread_waited_ms.append(round(min(max(thread_ms, fetch_ms, 0.0), every_ms), 3))
        if disturbed(waited_ms / 1000.0, wall_ms / 1000.0):
            return waited_ms, wall_ms
        return None

    def settle(self, warmup: int, wanted: int) -> None:
        """At the window's end: when fewer steps than asked for were undisturbed, the least disturbed
        of the busy ones are measured after all (the report says the machine was busy)."""
        measured = [i for i in range(warmup, len(self._cpu)) if i not in self.excluded]
        busy = sorted((self.waited_ms[i] if i < len(self.waited_ms) else 0.0, i) for i, why in self.excluded.items()
                      if why.startswith("it waited"))
        self.readmitted = 0
        while len(measured) < wanted and busy:
            _, index = busy.pop(0)
            self.excluded.pop(index)
            measured.append(index)
            self.readmitted += 1

    readmitted = 0

    def cut_short(self, index: int) -> None:
        self.excluded[index] = REASONS["cut"]

    def over_trace_budget(self, budget_mb: float | None, next_stacked: bool, later: int = 0) -> bool:
        """Whether the steps recorded so far, the next (with stacks or not) and `later` steps after it (without)
        project past the trace budget, less the sizing's margin: the warm-up as sized, each measured step as the
        sized step with or without its stacks, scaled by its CPU time against the first measured step recorded
        alike (a step that does more writes more), the next and the later ones as the last recorded alike."""
        fit = self.sized
        measured = list(zip(self._cpu, self._stacked))[self.session.warmup:]
        if not budget_mb or fit is None or not (fit.events_mb or fit.stacks_mb) or not measured:
            return False
        first: dict[bool, float] = {}
        ratio: dict[bool, float] = {}
        total = fit.warmup_mb
        for cpu, stacked in measured:
            ref = first.setdefault(stacked, cpu)
            ratio[stacked] = cpu / ref if ref > 0 else 1.0
            total += (fit.events_mb + (fit.stacks_mb if stacked else 0.0)) * ratio[stacked]
        total += (fit.events_mb + (fit.stacks_mb if next_stacked else 0.0)) * ratio.get(next_stacked, 1.0)
        total += later * fit.events_mb * ratio.get(False, 1.0)
        return total > MARGIN * budget_mb

    def typical_wall_s(self) -> float:
        """The median wall time of the window's steps (0 where it was not measured)."""
        walls = sorted(self._walls)
        return walls[len(walls) // 2] if walls else 0.0

    def busy_time_left(self) -> bool:
        """Whether the window may still go on for disturbed steps: at most twice the time the steps asked
        for would take undisturbed (the fastest step so far stands for one), and at least a second."""
        if not self._walls:
            return True
        spent = time.perf_counter() - self._window_t0
        return spent < max(1.0, BUSY_TIME_FACTOR * self.session.wanted_steps * min(self._walls))

    def summary(self) -> dict:
        return {"excluded_steps": {str(i): why for i, why in self.excluded.items()},
                "busy_steps_measured": self.readmitted, "self_contended_steps": self.self_contended,
                "extra_steps": self.extra_steps + self.busy_extra, "typical_step_s": round(self.typical_wall_s(), 4),
                "step_cpu_s": [round(c, 4) for c in self._cpu], "step_waited_ms": self.waited_ms,
                "step_fetch_waited_ms": self.fetch_waited_ms, "step_thread_waited_ms": self.thread_waited_ms}
