"""The hooks a session puts into torch: optimizer steps, zero_grad, backward, DataLoader batches,
top-level module calls without gradients (inference), os._exit and the stop signals. Each marks a
flush point or a step boundary for the session; perfaudit's own error in one never reaches the
user's script (it is recorded, and the window closes with what it has)."""
from __future__ import annotations

import functools
import os
import signal
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ...files import why, write_failed_exit
from ...outcome import Outcome
from ..emulation import emulate
from ..emulation.cuda_shim import gpu_present
from ..graph_replays import watch_graph_replays
from ..internal import record_internal_error
from ..probes.gpu_memory import GpuMemory
from ..probes.oom import OomWatch
from ..skipped_steps import watch_skipped_steps
from ..wrap import on_undo, patch
from .gradient_calls import watch_gradient_calls
from .user_processes import guard_user_processes

MAX_ORDER = 1000  # optimizer steps kept in order (a cadence needs a few of the rarer optimizer's)


# The profiler window's own exception: a BaseException so `except Exception` in user code lets it pass.
class WindowDone(BaseException):
    pass


class Interrupted(BaseException):
    pass


class Spawned(BaseException):
    """The script hands its training to other processes (torch.multiprocessing.spawn)."""


class StepHooks:
    """Mixed into Session: the hooks, installed once the session exists."""

    owns_signals = True  # a stop signal ends the script (the child's); in-process, the script keeps its own
    samples_startup = True  # the script's start-up is sampled (START001); in-process it began before perfaudit

    if TYPE_CHECKING:  # what the session (session.py) gives the hooks
        from ..probes.compile import CompileProbe
        from ..probes.live import Probes
        from ..probes.startup import StartupProbe
        from ..torch_types import Profiler, TorchModule
        from .selection import StepMarks
        from .steps import StepDetector
        torch: TorchModule
        config: dict
        probes: Probes
        compile: CompileProbe
        startup: StartupProbe
        marks: StepMarks
        detector: StepDetector
        prof: Profiler
        pid: int; warmup: int; step_index: int; steps_ended: int  # noqa: E702
        profiling: bool; full: bool; window_closed: bool; finished: bool; exporting: bool  # noqa: E702
        write_error: OSError | None
        optimizer_counts: dict[str, int]
        optimizer_order: list[str]
        _in_closure_step: bool
        _forward_hooks: tuple | None

        def flush(self, raise_done: bool = True) -> None: ...
        def finish(self, result: dict) -> None: ...
        def _where(self) -> tuple[str, int]: ...
        def _close_window(self, result: dict) -> None: ...

    # -- hooks ---------------------------------------------------------------------------------
    def install(self) -> None:
        torch = self.torch
        self._in_closure_step = False  # inside optimizer.step(closure)
        self.probes.on_optimizer_built = self._optimizer_built
        self.probes.on_spawn = self._spawned
        guard_user_processes(self._process_joined)
        self.probes.window_step = lambda: (self.step_index if self.prof is not None and not self.window_closed
                                           and self.step_index >= self.warmup else None)
        self.probes.on_batch = self._batch_fetched
        self.probes.on_iter = self.marks.new_epoch
        self.probes.before_batch = self._hook(self._training_activity)
        self.compile.where = self._where
        # global module hooks added or removed under torch.compile make compiled code recompile
        self.compile.on_activate = self._stop_inference_watch
        if emulate.wanted(self.config):  # before the probes: they wrap the CUDA calls it serves
            emulate.install(self.probes, lambda: self.steps_ended, self.config.get("emulated_gpu"))
        elif gpu_present():  # torch's own counters and allocator history over the same warm-up steps
            optimizers = lambda: [i["_ref"] for i in self.probes.optimizers.values()]  # noqa: E731
            self.probes.oom_watch = OomWatch(optimizers,  # and what held the memory if the script runs out of it
                                             scripts_history=lambda: self.probes.memory_history.on)
            self.probes.device_memory = GpuMemory(optimizers, self.probes.oom_watch)
            self.probes.add("device_memory", self.probes.device_memory)
            self.probes.add("oom", self.probes.oom_watch)
        self.probes.install()
        self.marks.install()
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        def before_step(opt, args, kwargs):
            # torch passes (optimizer, *step args): LBFGS.step(closure) gives (optimizer, closure)
            self.probes.optimizer_stepping(opt)
            closure = (kwargs or {}).get("closure") or next((a for a in args if a is not opt), None)
            self._in_closure_step = callable(closure)  # a closure step once the closure runs a backward
            self._training_activity()

        on_undo(register_optimizer_step_pre_hook(self._hook(before_step)).remove)
        self._flush_before_optimizer_ranges(torch)
        def after_step(opt, args, kwargs):
            self._in_closure_step = False
            self._count_optimizer_step(opt)
            self.detector.optimizer_stepped(_role(opt))

        on_undo(register_optimizer_step_post_hook(self._hook(after_step)).remove)
        watch_graph_replays(torch, self._hook(before_step), self._hook(after_step))  # a replay steps as its capture did
        watch_skipped_steps(torch, self._hook(lambda opt: self.detector.optimizer_stepped(_role(opt))))  # GradScaler's
        original_zero_grad = torch.optim.Optimizer.zero_grad
        flush = self._hook(self.flush)

        def zero_grad(opt, *args, **kwargs):
            flush()
            return original_zero_grad(opt, *args, **kwargs)

        patch(torch.optim.Optimizer, "zero_grad", zero_grad)
        original_backward = torch.autograd.backward
        before_backward, after_backward = self._hook(self._before_backward), self._hook(self._after_backward)

        def backward(*args, **kwargs):
            before_backward(args[0] if args else kwargs.get("tensors"))
            result = original_backward(*args, **kwargs)
            after_backward()
            return result

        patch(torch.autograd, "backward", backward)
        watch_gradient_calls(torch, before_backward, after_backward)  # autograd.grad, torch.func: backward too
        original_exit = os._exit

        def guarded_exit(code=0):
            if os.getpid() == self.pid:
                self.finish({"outcome": Outcome.OS_EXIT, "exit_code": code})
                if self.write_error is not None:  # the run folder could not be written: the runner says why
                    print(f"perfaudit: cannot write the run folder ({why(self.write_error)}): "
                          f"{self.write_error}", file=sys.stderr, flush=True)
                    code = write_failed_exit(self.write_error)
            original_exit(code)

        patch(os, "_exit", guarded_exit)
        if self.owns_signals:
            for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP):
                signal.signal(sig, self._on_signal)
        self._start_inference_watch()
        on_undo(self._stop_inference_watch)
        if self.profiling and self.samples_startup:
            self.startup.start()

    def _flush_before_optimizer_ranges(self, torch) -> None:
        """A step boundary waiting at an optimizer step is placed before the step's `Optimizer.step#…` range opens,
        not at its pre-hook inside it: a profiler stopped (the window's end, the sizing's) while a range begun under
        it is open corrupts torch's memory when the range ends. A closure trainer (LBFGS, Lightning) has no other
        point between its steps. torch wraps each optimizer class's step once, at its first instance
        (profile_hook_step): perfaudit's flush goes outside that wrapper."""
        wrap_step = torch.optim.Optimizer.profile_hook_step
        active = [True]
        flush = self._hook(self._training_activity)

        def profile_hook_step(func):
            hooked = wrap_step(func)

            @functools.wraps(hooked)
            def step(*args, **kwargs):
                if active:
                    flush()
                return hooked(*args, **kwargs)
            return step

        patch(torch.optim.Optimizer, "profile_hook_step", staticmethod(profile_hook_step))
        on_undo(active.clear)  # a class wrapped meanwhile keeps the wrapper: it does nothing from then on

    def _hook(self, fn):
        """A step hook as the user's script calls it: perfaudit's own error in it never reaches the
        script. It is recorded, and the window closes with what it has (exit 4 after the report)."""
        def hooked(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                record_internal_error("step detection", exc)
                self._close_on_internal_error()
        return hooked

    def _close_on_internal_error(self) -> None:
        if self.window_closed or os.getpid() != self.pid:
            return
        try:
            self._close_window({"outcome": Outcome.WINDOW_COMPLETE, "internal_error": True})
        except Exception as exc:
            record_internal_error("writing the trace", exc)
        if not self.full:
            raise WindowDone()

    def _count_optimizer_step(self, opt) -> None:
        """Optimizer steps in the measured steps, per optimizer (class and the line that built it): what
        one measured step holds when optimizers step at different cadences; and the order of every step until
        the window closes, from which their cadence is read (a short window miscounts it)."""
        site = (self.probes.optimizers.get(id(opt)) or {}).get("site") or {}
        label = type(opt).__name__ + (f" (line {site['line']})" if site.get("line") else "")
        if not self.window_closed and len(self.optimizer_order) < MAX_ORDER:
            self.optimizer_order.append(label)
        if self.probes.window_step() is None:
            return
        self.optimizer_counts[label] = self.optimizer_counts.get(label, 0) + 1

    def _training_activity(self) -> None:
        """A batch is fetched, backward() or an optimizer step begins: start-up is over, and a step
        boundary waiting for this point is placed here."""
        if os.getpid() != self.pid:
            return
        self.startup.stop()
        self.flush()

    def _batch_fetched(self, loader_id=None) -> None:
        self.marks.batch(loader_id)
        self.detector.batch_fetched()

    def _before_backward(self, tensors) -> None:
        self._training_activity()
        self.backward_called(tensors)

    def _after_backward(self) -> None:
        if self._in_closure_step:  # the forward and backward run inside optimizer.step(closure) (LBFGS, Lightning's
            self.detector.closure_step()  # automatic optimization); a closure that runs none is no closure step
        self._stop_inference_watch()
        self.detector.backward_done()

    def backward_called(self, tensors) -> None:
        """backward() is about to run on `tensors` (TimingSession keeps the loss)."""

    # -- inference: top-level module calls with gradients off, while nothing trains -----------------
    def _start_inference_watch(self) -> None:
        torch = self.torch
        flush, inference_call = self._hook(self.flush), self._hook(self.detector.inference_call)

        def pre(module, inputs):
            if self._depth == 0 and not torch.is_grad_enabled() and os.getpid() == self.pid:
                flush()
            self._depth += 1

        def post(module, inputs, output):
            self._depth = max(self._depth - 1, 0)
            if self._depth == 0 and not torch.is_grad_enabled() and os.getpid() == self.pid:
                inference_call()

        mods = torch.nn.modules.module
        self._forward_hooks = (mods.register_module_forward_pre_hook(pre), mods.register_module_forward_hook(post))

    def _stop_inference_watch(self) -> None:
        if self._forward_hooks is not None:
            for handle in self._forward_hooks:
                handle.remove()
            self._forward_hooks = None

    def _optimizer_built(self) -> None:
        self._stop_inference_watch()
        self.detector.optimizer_built()

    def _spawned(self, api: str) -> None:
        if os.getpid() == self.pid and not self.finished:
            raise Spawned(api)

    def _process_joined(self, api: str, stop) -> None:
        """The script waits for a process it started on its own function, and has not trained itself: its
        training is in those processes (stopped: the run ends, unless --full lets the script go on)."""
        if self.detector.source is None and not self.full:
            stop()
            self._spawned(api)

    def _on_signal(self, signum, frame):
        if os.getpid() != self.pid:  # a forked worker: behave as it would without perfaudit
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self.exporting:  # the trace is being written: finish that, then stop
            self.stop_after_export = signal.Signals(signum).name
            return
        if not self.finished:
            raise Interrupted(signal.Signals(signum).name)

    stop_after_export: str | None = None

    @contextmanager
    def signals_held(self):
        """While the trace is written or the profiler switched between steps, a signal is noted, not raised:
        the work finishes, then the run stops (Interrupted)."""
        self.exporting = True
        previous = hold_sigint(self)
        try:
            yield
        finally:
            self.exporting = False
            restore_sigint(previous)
        if self.stop_after_export and not self.finished:
            raise Interrupted(self.stop_after_export)


def hold_sigint(session):
    """While the trace is written, Ctrl-C is noted, not raised: the export finishes, then the run stops."""
    def noted(signum, frame):
        session.stop_after_export = "SIGINT"
    try:
        return signal.signal(signal.SIGINT, noted)
    except (ValueError, OSError):  # not the main thread
        return None


def restore_sigint(previous) -> None:
    if previous is not None:
        try:
            signal.signal(signal.SIGINT, previous)
        except (ValueError, OSError):
            pass


def _role(optimizer) -> tuple:
    """An optimizer's role in the script: its class and first parameter, so that an optimizer rebuilt
    over the same parameters (every epoch, say) is the same one for step detection."""
    try:
        first = id(optimizer.param_groups[0]["params"][0])
    except (AttributeError, IndexError, KeyError, TypeError):
        first = id(optimizer)
    return type(optimizer).__name__, first
