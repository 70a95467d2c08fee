"""The child of `perfaudit verify`: the script as it is or with fixes served in place of its files,
seeded, with no profiler; it keeps the wall time of every step and the loss of every step.

Same step detection as a profiled run (session.Session), so A and B measure the same steps. The loss
is the scalar tensor `backward()` was called on, kept as a tensor and read only after the window,
so measuring it adds no host-device sync to the steps."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import random
import sys
import time
from typing import Any

from ...outcome import Outcome
from ..clock import BUSY_MIN_S, others_share, own_cpu, run_queue_wait_s, usable_cpus, waited_for_others
from ..window.session import Session, WindowDone
from .watch import LineWatcher

MAX_TIMED_STEPS = 300  # min_measure_s never makes a run measure more steps than this


class TimingSession(Session):
    profiling = False

    def __init__(self, config: dict, script: str):
        super().__init__(config, script)
        self.ends: list[float] = []               # the end of each step (perf_counter)
        self.starts: list[float] = []             # the start of the next, after the clocks read at that end
        self.waits: list[float | None] = []       # at each end: seconds the threads waited for a CPU so far
        self.own_cpu: list[tuple[float, float]] = []  # at each end: CPU s of the script's processes, its children's
        self.others_share: list[float | None] = []  # at each end: other processes' recent share of the CPUs
        self.losses: list[tuple[int, Any]] = []  # (step index, detached scalar loss)
        self.all_seen = False                     # verify's exercise run: every watched line ran

    def install(self) -> None:
        super().install()
        others_share(own_cpu()[0], wanted=False)  # the machine's use from the script's start
        if self.config.get("init_draws"):  # B of a fix that removes biases: A's initial weights
            from .init_draws import keep_bias_draws
            keep_bias_draws(self.config["init_draws"])
        watch = self.config.get("watch")
        self.watcher = None
        if watch:  # verify's exercise run: the edited lines and the later uses of what they assign
            self.watcher = LineWatcher(watch, self._all_seen)
            self.watcher.start()

    def _all_seen(self) -> None:
        """Every watched line ran: once the measured window is over, the script need not go on (when
        they all ran before it ended, it stops at its end)."""
        self.all_seen = True
        if self.window_closed and os.getpid() == self.pid:
            raise WindowDone()

    def result_extra(self, result: dict) -> dict:
        if self.watcher is None:
            return {}
        self.watcher.stop()
        return {"exercised": self.watcher.report(), "ended": str(result.get("outcome")), "ended_at": time.time()}

    def backward_called(self, tensors) -> None:
        torch = self.torch
        if isinstance(tensors, torch.Tensor) and tensors.numel() == 1 and os.getpid() == self.pid:
            self.losses.append((len(self.ends), tensors.detach()))

    def _restart(self, why: str) -> None:
        """The steps so far were another phase (pre-training, a first optimizer): count from here."""
        if not self.window_closed:
            self.restarts.append(why)
            self.ends.clear()
            self.starts.clear()
            self.waits.clear()
            self.own_cpu.clear()
            self.others_share.clear()
            self.losses.clear()

    def flush(self, raise_done: bool = True) -> None:
        if not self.pending or os.getpid() != self.pid or self.window_closed:
            return
        self.pending = False
        torch = self.torch
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the step's device work belongs to the step (A and B alike)
        self.ends.append(time.perf_counter())
        self.waits.append(run_queue_wait_s())
        self.own_cpu.append(own_cpu())
        before, now = self.waits[-2] if len(self.waits) > 1 else None, self.waits[-1]
        waited = before is not None and now is not None and now - before > BUSY_MIN_S
        self.others_share.append(others_share(self.own_cpu[-1][0], wanted=waited))
        self._say("step", step=len(self.ends), warmup=self.warmup, steps=self.steps)
        self.starts.append(time.perf_counter())  # the reads above took 0.05-0.1 ms: not the script's step
        if len(self.ends) > self.warmup + self.steps and self._measured_enough():
            self._close_window({"outcome": Outcome.WINDOW_COMPLETE})
            if raise_done and (not self.full or self.all_seen):
                raise WindowDone()

    def _measured_enough(self) -> bool:
        """At least `min_measure_s` of steps (bisect): a run of a few short steps sees only one moment of a
        busy machine, and runs then differ by more than the change looked for."""
        return (len(self.ends) > self.warmup + MAX_TIMED_STEPS
                or self.ends[-1] - self.ends[self.warmup] >= (self.config.get("min_measure_s") or 0.0))

    def _close_window(self, result: dict) -> None:
        if self.window_closed:
            return
        self.window_closed = True
        first = self.warmup  # ends[first] ends the last warm-up step
        times = [b - a for a, b in zip(self.starts[first:], self.ends[first + 1:])]
        per_step: dict[int, float] = {}
        for step, loss in self.losses:
            if first < step <= first + len(times):  # the loss of step k is taken before ends[k]
                per_step[step] = per_step.get(step, 0.0) + float(loss)
        losses = [per_step.get(step) for step in range(first + 1, first + 1 + len(times))]
        waits = self.waits[first:first + len(times) + 1]
        known = [w for w in waits if w is not None]
        own = self.own_cpu[first:first + len(times) + 1]
        cpus = usable_cpus()
        shares = self.others_share[first + 1:first + len(times) + 1]
        waited = ([round(waited_for_others(b - a, t, c1[0] - c0[0], cpus, c1[1] - c0[1], share), 6)  # not its own
                   for a, b, t, c0, c1, share in zip(known, known[1:], times, own, own[1:], shares)]
                  if len(known) == len(waits) == len(own) == len(times) + 1 else None)  # None: the OS does not say
        timing = {"step_times_s": times, "losses": losses, "warmup": self.warmup, "restarts": self.restarts,
                  "device": "cuda" if self.torch.cuda.is_available() else "cpu", "step_waited_s": waited}
        out = {**result, "timing": timing, "steps_recorded": len(times), "warmup": self.warmup,
               "step_source": self.detector.source, "profiling_started": False,
               "optimizers_built": self.detector.optimizers_built}
        tmp = os.path.join(self.run_dir, "result.json.tmp")
        with open(tmp, "w") as f:
            json.dump(out, f, default=str)
        os.replace(tmp, os.path.join(self.run_dir, "result.json"))


def seed_everything(seed: int | None) -> None:
    """The same seeds for A and B, set before the script starts (a script that seeds itself wins)."""
    if seed is None:
        return
    import torch
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy
        numpy.random.seed(seed)
    except ImportError:
        pass


class _PatchedLoader(importlib.machinery.SourceFileLoader):
    """Loads a module's fixed source under the module's own path (no bytecode cache either way)."""

    def __init__(self, fullname: str, path: str, patched: str):
        super().__init__(fullname, path)
        self.patched = patched

    def get_code(self, fullname):
        with open(self.patched, encoding="utf-8") as f:
            return compile(f.read(), self.path, "exec", dont_inherit=True)


class _PatchedFinder(importlib.abc.MetaPathFinder):
    def __init__(self, patched: dict[str, str]):
        self.patched = {os.path.realpath(k): v for k, v in patched.items()}

    def find_spec(self, fullname, path, target=None):
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.origin and os.path.realpath(spec.origin) in self.patched:
            spec.loader = _PatchedLoader(fullname, spec.origin, self.patched[os.path.realpath(spec.origin)])
        return spec


def serve_patched_sources(patched: dict[str, str]) -> None:
    """Imports of the user's fixed modules read the fixed text; the files on disk stay untouched."""
    if patched:
        sys.meta_path.insert(0, _PatchedFinder(patched))
