"""The audited process's session: where steps end, and the bounded profiler window over them.

The session installs the probes and the step hooks, sizes one step, records `warmup + steps` steps under
torch.profiler, writes them, times a few more with nothing recording (plain.py) and then ends the script
(WindowDone), unless asked to let it run on. Whatever happens
to the script (it finishes, raises, calls sys.exit or os._exit, is interrupted), `finish()` writes what
was recorded to the run folder: `trace.json.gz` (the Kineto trace with the probes embedded under the
`perfaudit` key) and `result.json` (the outcome). perfaudit.child composes it and runs the script."""
from __future__ import annotations

import json
import os
import time

from ...outcome import Outcome
from ..clock import OwnClock
from ..emulation.cuda_shim import gpu_present
from ..graph_replays import in_capture
from ..internal import internal_errors, record_internal_error
from ..probes.compile import CompileProbe
from ..probes.environment import choose_threads
from ..probes.flops import FlopProbe
from ..probes.live import Probes
from ..probes.startup import StartupProbe
from .export import write_json
from .frameworks import detect as detect_framework
from .parts import WindowProfilers
from .plain import PLAIN_MAX_STEP_S, PLAIN_STEPS, PlainSteps
from .rank import launched_rank
from .records import WindowRecords
from .selection import StepMarks
from .sizing import Sizer, fit_budget, host_blocks
from .step_hooks import Interrupted, Spawned, StepHooks, WindowDone
from .steps import StepDetector

# torch.compile: the window starts after this many steps without a new compile, and warm-up (and the
# sizing step) grows by at most MAX_COMPILE_WARMUP steps for it (a frame recompiling every step would
# otherwise never let the window start; it is then measured, and reported, as it is)
QUIET_STEPS_AFTER_COMPILE = 2
MAX_COMPILE_WARMUP = 10


__all__ = ["Interrupted", "Session", "Spawned", "WindowDone", "launched_rank", "running_session"]

_INSTALLED: list = []  # the sessions whose hooks are in this process


def running_session():
    """The session recording this process (`perfaudit run`'s child, a callback's), if one is."""
    return next((s for s in _INSTALLED if not s.finished), None)


class Session(WindowRecords, StepHooks):
    profiling = True  # TimingSession (verify) measures plain step times instead

    def __init__(self, config: dict, script: str):
        import torch

        self.torch = torch
        self.config = config
        self.script = script
        self.run_dir = config["run_dir"]
        self.warmup, self.steps, self.full = config["warmup"], config["steps"], config["full"]
        self.wanted_steps = self.steps  # measured steps asked for (after the trace budget)
        self.pid = os.getpid()       # DataLoader workers fork this process: they must not report
        self.probes = Probes()
        self.compile = CompileProbe()
        self.startup = StartupProbe()
        self.probes.add("compile", self.compile)
        self.probes.add("startup", self.startup)
        self.flops = FlopProbe()
        self.probes.add("flops", self.flops)
        self.marks = StepMarks(self)  # what makes a step unlike a training step (an evaluation pass …)
        self.detector = StepDetector(self._step_boundary, self._restart)
        self.prof = None
        self.profilers = WindowProfilers(config, self.probes, torch)
        self.export_error: str | None = None
        self.write_error: OSError | None = None  # the run folder could not be written (the child exits saying so)
        self.step_rf = None
        self.step_index = 0          # steps completed inside the profiled window
        self.window_closed = False
        self.finished = False
        self.exporting = False       # signals wait while the trace is written
        self.pending = False         # a step ended; its boundary waits for the next flush point
        self.clock = OwnClock()      # the recording budget counts this process's time, not other processes'
        self.budget_s = config.get("record_budget_s")  # recording stops after this many seconds
        self.budget_hit = False
        self.trace_budget = config.get("trace_budget_mb")  # MB of uncompressed trace the window may write
        self.sizing: Sizer | None = None
        self.trimmed: dict = {}
        self.restarts: list[str] = []
        self._forward_hooks: tuple | None = None
        self._depth = 0
        self.steps_ended = 0         # every step the detector saw end, before the window too
        self.compile_warmup = 0      # warm-up steps added because the step was still compiling
        self.sizing_retries = 0
        self.optimizer_counts: dict[str, int] = {}  # optimizer steps in the measured steps, per optimizer
        self.optimizer_order: list[str] = []  # each optimizer step's label until the window closes (the cadence)
        self.framework: dict | None = None  # Lightning, Hugging Face's Trainer, Accelerate (frameworks.py)
        self.trace_path: str | None = None
        self.rank = self._launched_rank()  # under torchrun: every rank writes rank<R>.* files in the run folder
        self.probes.worker_dir = self._path("workers")
        self._progress = open(self._path("progress.jsonl"), "a", buffering=1)
        self.threads = choose_threads(torch, config, self.rank is None and self.profiling and self.fits_threads)
        # steps timed with nothing recording, after the window (not for a rank: its steps pair with the others')
        self.plain = PlainSteps(self.probes, PLAIN_STEPS if self.times_plain_steps and self.rank is None else 0)

    times_plain_steps = True  # steps after the window timed without the profiler (plain.py; not in-process)
    fits_threads = True  # on a busy machine, fit the intra-op threads to the free cores (not in-process)
    counts_flops = True  # FlopCounterMode over one step after the window (the script ends then; not in-process)

    def _launched_rank(self) -> int | None:
        return launched_rank()

    def install(self) -> None:
        super().install()
        _INSTALLED.append(self)

    def _path(self, name: str) -> str:
        return os.path.join(self.run_dir, name if self.rank is None else f"rank{self.rank}.{name}")

    def _say(self, phase: str, **extra) -> None:
        self._progress.write(json.dumps({"phase": phase, "t": time.time(), **extra}) + "\n")

    def _where(self) -> tuple[str, int]:
        """The phase and step a compile falls in: before the first step ended, before the window
        (sizing and warm-up), in the measured window, or after it."""
        if self.steps_ended == 0:
            return "startup", 0
        if self.prof is None or self.step_index < self.warmup:
            return ("after" if self.window_closed else "warmup"), self.steps_ended
        return ("after" if self.window_closed else "window"), self.steps_ended

    # -- the window ------------------------------------------------------------------------------
    def _start_profiler(self) -> None:
        if self.prof is not None or self.window_closed:
            return
        self.startup.stop()  # the first steps have ended: start-up is over in any case
        try:
            self.framework = detect_framework()
        except Exception as exc:
            record_internal_error("framework detection", exc)
        self._say("profiling", device="cuda" if gpu_present() else "cpu")
        self.probes.before_profiling()
        self.prof = self.profilers.new(self.profilers.wants_stacks(self.step_index, self.warmup))
        self.marks.window_started()
        self.profilers.start(self.prof)
        self.clock.start()
        self._open_step()

    @property
    def _module_trace_step(self) -> int:
        """Module order is watched over one step: the last warm-up step (its hooks cost time)."""
        return max(self.warmup - 1, 0)

    def _open_step(self) -> None:
        if self.step_index == max(self._module_trace_step - 1, 0) and not self.compile.active:
            self.probes.start_device_memory()  # over two warm-up steps; not under compiled code
        if self.step_index == self._module_trace_step:
            if not self.compile.active:  # a global module hook would make compiled code recompile
                self.probes.start_module_trace()
            if self.counts_flops:
                self.flops.start_compiled_capture() if self.compile.active else self.flops.start_capture()
            self.probes.start_line_trace()
        self.marks.step_opened(self.step_index)
        step_rf = self.step_rf = self.torch.profiler.record_function(f"ProfilerStep#{self.step_index}")
        step_rf.__enter__()

    def _fit_budget(self, events: int, calls: int) -> None:
        """Fewer recorded steps (and, only if one step alone is too big, no Python stacks) when the
        window would write more than the trace budget (sizing.py)."""
        fit = fit_budget(events, calls, self.trace_budget, self.warmup, self.steps, self.config["with_stack"],
                         bool(self.config.get("keep_stacks")))
        self.warmup, self.steps, self.config["with_stack"] = fit.warmup, fit.steps, fit.with_stack
        self.wanted_steps = fit.steps
        self.trimmed.update(fit.trimmed)
        self.profilers.plan(fit.stacked_steps, fit.warmup_stacks)
        self.marks.sized = fit
        self._say("sized", mb_per_step=fit.mb_per_step, warmup=self.warmup, steps=self.steps)

    def _restart(self, why: str) -> None:
        """The steps counted so far belong to another phase (pre-training, a weaker step marker) or the
        iteration was cut mid-way: warm up again from here, so the measured steps are this phase's.
        The current step is mixed, so it does not count as warm-up."""
        if self.prof is None or self.window_closed:
            return
        self.restarts.append(why)
        self.warmup = max(self.warmup, self.step_index + 1 + self.config["warmup"])
        self._say("restart", why=why, warmup=self.warmup)

    def _close_step(self) -> None:
        if self.step_rf is not None:
            self.step_rf.__exit__(None, None, None)
            self.step_rf = None

    def _step_boundary(self) -> None:
        """A step ended. Its boundary is placed at the next flush point (next batch, zero_grad,
        backward or optimizer step), so that work after optimizer.step() stays in its step and
        the Optimizer.step range is not cut."""
        if not self.window_closed or self.plain.timing:
            self.pending = True

    def flush(self, raise_done: bool = True) -> None:
        if not self.pending or os.getpid() != self.pid or in_capture():  # a boundary waits for the capture's end
            return
        self.pending = False
        compiled = self.compile.compiled_since_last_check()  # tagged with the step that ended
        self.steps_ended += 1
        if self.window_closed:  # a plain step after the window ended
            if not self.plain.next():
                self._write_plain()
                if raise_done and not self.full:
                    raise WindowDone()
            return
        if self.prof is None:
            if raise_done:
                self._size_next_step(compiled)
            return
        if self.step_index >= self.warmup:
            self.probes.sample_window_state()
        self._close_step()
        if self.step_index == self._module_trace_step:
            self.probes.stop_module_trace()
            self.flops.stop_capture()
        if self.marks.step_closed(self.step_index, self.step_index >= self.warmup, self.profilers.with_stack[-1]):
            self.steps += 1  # not a training step: one more in its place, bounded
        self.step_index += 1
        if compiled and self.step_index <= self.warmup:  # still compiling: warm up on, within a bound
            extended = min(self.step_index + QUIET_STEPS_AFTER_COMPILE, self.config["warmup"] + MAX_COMPILE_WARMUP)
            if extended > self.warmup:
                self.compile_warmup += extended - self.warmup
                self.warmup = extended
                self._say("compiling", warmup=self.warmup)
        if self.step_index == self.warmup:
            self.probes.start_sync_debug()  # measured steps only: the warnings cost time
        self._say("step", step=self.step_index, warmup=self.warmup, steps=self.steps)
        done = self.step_index >= self.warmup + self.steps  # a window that ends here was not cut short
        over_budget = (not done and self.budget_s is not None and self.budget_s > 0 and self.step_index > self.warmup
                       and self.clock.elapsed() > self.budget_s)
        left_out = self.step_index - 1 in self.marks.excluded
        planned_after_next = max(self.warmup + self.wanted_steps - self.step_index - 1, 0)
        retry_fits = not left_out or not self.marks.over_trace_budget(self.trace_budget, True, planned_after_next)
        self.profilers.step_recorded(self.step_index, self.warmup, left_out, retry_fits)
        over_size = not done and self.marks.over_trace_budget(self.trace_budget,
                                                              self.profilers.wants_stacks(self.step_index, self.warmup))
        if over_budget:
            self.budget_hit = True
        if over_size and self.step_index < self.warmup + self.wanted_steps:  # not only the extra steps cut
            self.trimmed["cut_at_step"] = self.step_index
        if done or over_budget or over_size:
            self._close_window({"outcome": Outcome.WINDOW_COMPLETE})
            step_s = self.marks.typical_wall_s()
            if raise_done and self.plain.wanted and self.trace_path and step_s <= PLAIN_MAX_STEP_S:
                self.plain.start(step_s)
                self._say("timing_plain", steps=self.plain.runs)
                if self.plain.timing:
                    return
            if not self.full and raise_done:
                raise WindowDone()
            return
        with self.signals_held():  # stacks on or off from the next step (parts.py)
            self.prof = self.profilers.next_part(self.prof, self.step_index, self.warmup)
        self._open_step()

    def _size_next_step(self, compiled: bool) -> None:
        """The first step ended: size the second; once a sized step did not compile and was a
        training step, record from the next."""
        if self.sizing is None:
            own = lambda prof: setattr(self.probes, "own_profiler", prof)  # noqa: E731
            self.sizing = Sizer(self.torch, own, host_blocks(self.probes.placement, self.config))
            self.marks.sizing_started()
            self.sizing.start()
            return
        sized = self.sizing.stop()
        unlike = self.marks.sizing_unlike_training()
        if (compiled or unlike) and self.sizing_retries < MAX_COMPILE_WARMUP:  # not a fair sample: again
            self.sizing_retries += 1
            self.marks.sizing_started()
            self.sizing.start()
            return
        self._fit_budget(*sized)
        self._start_profiler()

    def _close_window(self, result: dict) -> None:
        if self.window_closed:
            return
        self.window_closed = True
        self.marks.window_closed()
        if self.profilers.refused and not any(self.profilers.with_stack):
            self.trimmed["stacks_refused"] = self.profilers.refused
        self.probes.stop_module_trace()
        self.probes.stop_sync_debug()
        if self.step_rf is not None and result.get("outcome") != Outcome.WINDOW_COMPLETE and self.rank is None:
            self.marks.cut_short(self.step_index)  # stopped mid-step: that step is not averaged in
        self._close_step()
        with self.signals_held():  # the profiler's stop, result.json, the trace's export
            self._stop_and_write(result)

    def finish(self, result: dict) -> None:
        """Called once whatever happened: close the window if still open, then record the outcome."""
        if self.finished or os.getpid() != self.pid:
            return
        self.finished = True
        self.startup.stop("the script ended")
        if self.sizing is not None and self.prof is None and self.sizing.prof is not None:
            self.sizing.stop()
        try:
            self.flush(raise_done=False)
        except Exception as exc:
            record_internal_error("step detection", exc)
        if self.probes.oom_watch is not None:  # a CUDA out-of-memory error: what held the memory at that moment
            self.probes.oom_watch.attach(result)
        in_plain = self.plain.timing
        if in_plain:  # the script ended (or stopped) during the plain steps: those timed are kept
            self._write_plain()
        if not self.window_closed:
            self._close_window(result)
        else:
            path = self._path("result.json")
            try:
                with open(path) as f:
                    previous = json.load(f)
                # the script's own end in the steps only perfaudit ran it on for is not a failure of the run
                ended = Outcome.of(result) in (Outcome.RAISED, Outcome.EXITED, Outcome.OS_EXIT) and in_plain
                if result["outcome"] not in (Outcome.COMPLETED, Outcome.WINDOW_COMPLETE) and not ended:
                    previous["after_window"] = result
                previous["internal_errors"] = internal_errors()
                previous.update(self.result_extra(result))
                write_json(path, previous)
            except OSError as exc:
                self.write_error = self.write_error or exc
        # not after a stop (Ctrl-C, a timeout, a crash): the user waits for the report, not for one more step
        ended_well = Outcome.of(result) in (Outcome.WINDOW_COMPLETE, Outcome.COMPLETED)
        if self.counts_flops and self.trace_path and self.rank is None and ended_well:
            try:
                self._count_flops()
            except Exception as exc:  # the report counts from the op shapes instead
                record_internal_error("FLOP count", exc)
        self._say("done")
