"""The window's profiler sessions: one, or more when Python stacks change between steps (sizing.py): the
warm-up recorded without them where its probes' Python would pass the trace budget, and the measured steps
after the first without them where the budget keeps stacks for that step only. Then a profiler is stopped and
kept between two steps, the next one started, and all are written into the one trace (export.py).

A switch waits for a step boundary where none of the script's record_function ranges is open (a range of the
script's own around its whole step): a range begun under one profiler and ended under the next corrupts
torch's memory, and the export crashes (closure_trainer.py's did, when its steps turned over inside the
optimizer's `Optimizer.step#…` range: they now turn over before it opens, step_hooks.py). Where no boundary is
free, the steps keep the stacks they have (the trace budget cuts them), or go on without."""
from __future__ import annotations

from ..emulation.cuda_shim import gpu_present
from ..probes.host_overhead import HostOverhead
from ..wrap import patch
from .sizing import host_blocks

RETRIES = 1    # a step with stacks recorded again in place of one left out (a busy machine's)


class WindowProfilers:
    def __init__(self, config: dict, probes, torch):
        self.config, self.probes = config, probes
        self.torch = torch
        self.open_ranges: dict[int, str] = {}  # the record_function ranges open now (id: name), once watched
        self.refused: list[str] = []  # the ranges open where stacks were to come on and could not
        self.stacked_steps: int | None = None  # measured steps with stacks, when the others go without
        self.warmup_stacks = True              # the warm-up recorded with stacks (else a session of its own)
        self.kept: list = []                   # the stopped profilers of the parts before the current one
        self.with_stack: list[bool] = []       # each part's, the current one's last
        self.stacked = self.stacked_kept = 0   # measured steps recorded with stacks; those not left out
        self._stopped: set[int] = set()
        self.calibrated = False

    def plan(self, stacked_steps: int | None, warmup_stacks: bool = True) -> None:
        """The sizing's verdict: stacks on every measured step (None), or on the first `stacked_steps` measured
        ones only; on the warm-up too, or not (`warmup_stacks`). Where stacks change between steps the script's
        ranges are watched from here (only then: a watch on every run's ranges changed how often torch's own
        crash at a profiler's stop inside a range showed, 5 in 38 runs of closure_trainer.py against 0 in 28).
        A range opened before this is not seen."""
        self.stacked_steps, self.warmup_stacks = stacked_steps, warmup_stacks
        if stacked_steps is not None or not warmup_stacks:
            self._watch_ranges(self.torch)

    def wants_stacks(self, step_index: int, warmup: int) -> bool:
        """Whether step `step_index` is to be recorded with stacks: never once a measured step went without them
        (at most one switch on, one off)."""
        if not self.config["with_stack"]:
            return False
        if step_index < warmup and not self.warmup_stacks and not any(self.with_stack):
            return False
        return self.stacked_steps is None or (self.stacked_kept < self.stacked_steps
                                              and self.stacked < self.stacked_steps + RETRIES)

    def new(self, with_stack: bool):
        """A torch.profiler session as the window records it; perfaudit's own (no longer neutralised)."""
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu_present() else [])
        prof = profile(activities=activities, with_stack=with_stack, record_shapes=self.config["record_shapes"],
                       profile_memory=host_blocks(self.probes.placement, self.config))
        self.probes.own_profiler = prof
        self.with_stack.append(with_stack)
        return prof

    def step_recorded(self, step_index: int, warmup: int, left_out: bool, retry_fits: bool = True) -> None:
        """The step before `step_index` ended; `left_out`: it is not measured (a busy machine's): one with stacks
        is then recorded again, a few times at most, and only where the trace budget still holds the steps
        planned after it (`retry_fits`): the stacks of a busy step are as good, its time is not."""
        if self.with_stack[-1] and step_index - 1 >= warmup and self.stacked_steps is not None:
            self.stacked += 1
            self.stacked_kept += not left_out
            if left_out and not retry_fits:
                self.stacked = max(self.stacked, self.stacked_steps + RETRIES)

    def next_part(self, prof, step_index: int, warmup: int):
        """Between two steps (step_recorded first): the profiler for the next step, `prof` itself unless stacks
        change there (then `prof` is stopped and kept, and the next one started)."""
        wanted = self.wants_stacks(step_index, warmup)
        if wanted == self.with_stack[-1]:
            return prof
        if self.open_ranges:
            if wanted and not any(self.with_stack):
                self.refused = sorted(set(self.open_ranges.values()))[:3]
            return prof
        self.stop(prof)
        later = self.new(wanted)
        self.start(later)
        self.kept.append(prof)  # last: a Ctrl-C before here leaves `prof` the session's, never a part twice
        return later

    def start(self, prof) -> None:
        """Starts `prof`; the first with stacks (the first, where none has them) with the host-overhead
        calibration around its start: it prices what the measured steps' recording costs."""
        if self.calibrated or (self.config["with_stack"] and not self.with_stack[-1]):
            prof.start()
            return
        self.calibrated = True
        HostOverhead(self.torch, self.probes.placement).around(prof.start, self.probes)

    def _watch_ranges(self, torch) -> None:
        rf = torch.autograd.profiler.record_function
        enter, leave, ranges = rf.__enter__, rf.__exit__, self.open_ranges

        def entered(r):
            result = enter(r)
            ranges[id(r)] = str(getattr(r, "name", "?"))
            return result

        def left(r, *exc):
            ranges.pop(id(r), None)
            return leave(r, *exc)
        patch(rf, "__enter__", entered)
        patch(rf, "__exit__", left)

    def stop(self, prof) -> None:
        """Stops `prof` once: a second stop of a stopped profiler leaves results that crash its export."""
        if id(prof) in self._stopped:
            return
        self._stopped.add(id(prof))
        try:
            prof.stop()
        except Exception:  # nothing was recorded: the export says so
            pass

    def earlier_parts(self) -> list:
        """What export_trace writes before the current profiler's steps: (exporter, with stacks) per part."""
        return [(_Kept(prof, self.probes), stacks) for prof, stacks in zip(self.kept, self.with_stack)]


class _Kept:
    """A stopped profiler of earlier steps, exported as perfaudit's own (every other one is neutralised)."""

    def __init__(self, prof, probes):
        self.prof, self.probes = prof, probes

    def export_chrome_trace(self, path: str) -> None:
        own, self.probes.own_profiler = self.probes.own_profiler, self.prof
        try:
            self.prof.export_chrome_trace(path)
        finally:
            self.probes.own_profiler = own
