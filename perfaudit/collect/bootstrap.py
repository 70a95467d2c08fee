"""The child process: run the user's script as `python SCRIPT ARGS` would, under a bounded profiler window.

Invoked as `python -m perfaudit.collect.bootstrap CONFIG SCRIPT [ARGS...]`. Whatever happens to the
script (it finishes, raises, calls sys.exit or os._exit, is interrupted), what was recorded is
written to the run folder: `trace.json.gz` (Kineto trace with the probes embedded under the
`perfaudit` key) and `result.json` (the outcome).
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import sys
import time
import traceback

from ..outcome import Outcome


# The profiler window's own exception: a BaseException so `except Exception` in user code lets it pass.
class WindowDone(BaseException):
    pass


class Interrupted(BaseException):
    pass


class Spawned(BaseException):
    """The script hands its training to other processes (torch.multiprocessing.spawn)."""


def _user_frame_of(tb) -> dict | None:
    from .probes import is_user_file
    last = None
    for frame, line in traceback.walk_tb(tb):
        if is_user_file(frame.f_code.co_filename):
            last = {"path": frame.f_code.co_filename, "line": line, "func": frame.f_code.co_name}
    return last


class Session:
    def __init__(self, config: dict, script: str):
        import torch

        from .probes import Probes
        from .steps import StepDetector

        self.torch = torch
        self.config = config
        self.script = script
        self.run_dir = config["run_dir"]
        self.warmup, self.steps, self.full = config["warmup"], config["steps"], config["full"]
        self.pid = os.getpid()       # DataLoader workers fork this process: they must not report
        self.probes = Probes()
        self.detector = StepDetector(self._step_boundary, self._restart)
        self.prof = None
        self.step_rf = None
        self.step_index = 0          # steps completed inside the profiled window
        self.window_closed = False
        self.finished = False
        self.pending = False         # a step ended; its boundary waits for the next flush point
        self.started_at = None
        self.budget_s = config.get("record_budget_s")  # recording stops after this many seconds
        self.budget_hit = False
        self.trace_budget = config.get("trace_budget_mb")  # MB of uncompressed trace the window may write
        self.sizing = None
        self.trimmed: dict = {}
        self.restarts: list[str] = []
        self._forward_hooks = None
        self._depth = 0
        self.steps_ended = 0         # every step the detector saw end, before the window too
        self.compile_warmup = 0      # warm-up steps added because the step was still compiling
        self.sizing_retries = 0
        self.trace_path: str | None = None
        self.rank = launched_rank()  # under torchrun: every rank writes rank<R>.* files in the run folder
        self._progress = open(self._path("progress.jsonl"), "a", buffering=1)

    def _path(self, name: str) -> str:
        return os.path.join(self.run_dir, name if self.rank is None else f"rank{self.rank}.{name}")

    # -- progress ------------------------------------------------------------------------------
    def _say(self, phase: str, **extra) -> None:
        self._progress.write(json.dumps({"phase": phase, "t": time.time(), **extra}) + "\n")

    # -- hooks ---------------------------------------------------------------------------------
    def install(self) -> None:
        torch = self.torch
        self.probes.on_optimizer_built = self._optimizer_built
        self.probes.on_spawn = self._spawned
        self.probes.window_step = lambda: (self.step_index if self.prof is not None and not self.window_closed
                                           and self.step_index >= self.warmup else None)
        self.probes.on_batch = self.detector.batch_fetched
        self.probes.before_batch = self.flush
        self.probes.compile.where = self._where
        # global module hooks added or removed under torch.compile make compiled code recompile
        self.probes.compile.on_activate = self._stop_inference_watch
        self.probes.install()
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
        def before_step(opt, args, kwargs):
            # torch passes (optimizer, *step args): LBFGS.step(closure) gives (optimizer, closure)
            closure = (kwargs or {}).get("closure") or next((a for a in args if a is not opt), None)
            if callable(closure):
                self.detector.closure_step()
            self.flush()

        register_optimizer_step_pre_hook(before_step)
        register_optimizer_step_post_hook(lambda opt, args, kwargs: self.detector.optimizer_stepped(_role(opt)))
        original_zero_grad = torch.optim.Optimizer.zero_grad

        def zero_grad(opt, *args, **kwargs):
            self.flush()
            return original_zero_grad(opt, *args, **kwargs)

        torch.optim.Optimizer.zero_grad = zero_grad
        original_backward = torch.autograd.backward

        def backward(*args, **kwargs):
            self.flush()
            self.backward_called(args[0] if args else kwargs.get("tensors"))
            result = original_backward(*args, **kwargs)
            self._stop_inference_watch()
            self.detector.backward_done()
            return result

        torch.autograd.backward = backward
        original_exit = os._exit

        def guarded_exit(code=0):
            if os.getpid() == self.pid:
                self.finish({"outcome": Outcome.OS_EXIT, "exit_code": code})
            original_exit(code)

        os._exit = guarded_exit
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        self._start_inference_watch()
        if self.profiling:
            self.probes.start_startup_sampling()
        _watch_parent(os.getppid())

    profiling = True  # TimingSession (verify) measures plain step times instead

    def _where(self) -> tuple[str, int]:
        """The phase and step a compile falls in: before the first step ended, before the window
        (sizing and warm-up), in the measured window, or after it."""
        if self.steps_ended == 0:
            return "startup", 0
        if self.prof is None or self.step_index < self.warmup:
            return ("after" if self.window_closed else "warmup"), self.steps_ended
        return ("after" if self.window_closed else "window"), self.steps_ended

    def backward_called(self, tensors) -> None:
        """backward() is about to run on `tensors` (TimingSession keeps the loss)."""

    # -- inference: top-level module calls with gradients off, while nothing trains -----------------
    def _start_inference_watch(self) -> None:
        torch = self.torch

        def pre(module, inputs):
            if self._depth == 0 and not torch.is_grad_enabled() and os.getpid() == self.pid:
                self.flush()
            self._depth += 1

        def post(module, inputs, output):
            self._depth = max(self._depth - 1, 0)
            if self._depth == 0 and not torch.is_grad_enabled() and os.getpid() == self.pid:
                self.detector.inference_call()

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

    def _on_signal(self, signum, frame):
        if os.getpid() != self.pid:  # a forked worker: behave as it would without perfaudit
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if not self.finished:
            raise Interrupted(signal.Signals(signum).name)

    # -- the window ------------------------------------------------------------------------------
    def _start_profiler(self) -> None:
        if self.prof is not None or self.window_closed:
            return
        torch = self.torch
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self.probes.stop_startup_sampling()  # the first step has ended: start-up is over
        self._say("profiling", device="cuda" if torch.cuda.is_available() else "cpu")
        self.prof = profile(activities=activities, with_stack=self.config["with_stack"],
                            record_shapes=self.config["record_shapes"])
        self.probes.own_profiler = self.prof
        self.prof.start()
        self.started_at = time.time()
        self._open_step()

    @property
    def _module_trace_step(self) -> int:
        """Module order is watched over one step: the last warm-up step (its hooks cost time)."""
        return max(self.warmup - 1, 0)

    def _open_step(self) -> None:
        if self.step_index == self._module_trace_step:
            if not self.probes.compile.active:  # a global module hook would make compiled code recompile
                self.probes.start_module_trace()
            self.probes.start_line_trace()
        self.step_rf = self.torch.profiler.record_function(f"ProfilerStep#{self.step_index}")
        self.step_rf.__enter__()

    def _fit_budget(self, events: int, calls: int) -> None:
        """Fewer recorded steps (and, if one step alone is too big, no Python stacks) when the window
        would write more than the trace budget: an op-heavy step (an RNN cell over a thousand time
        steps) can make a gigabyte of trace. The estimate: the events a light profiler recorded over
        one step, and the Python calls of that step (each an event with stacks, with its builtins)."""
        if not self.trace_budget or not (events or calls):
            return
        stacks = calls * BYTES_PER_PYTHON_CALL / 1e6
        per_step = events * BYTES_PER_EVENT / 1e6 + (stacks if self.config["with_stack"] else 0.0)
        budget = self.trace_budget
        if self.config["with_stack"] and per_step * 2 > budget:  # not even warm-up and one step fit
            self.config["with_stack"] = False
            self.trimmed["stacks"] = "off"
            per_step -= stacks
        fit = int(0.8 * budget // max(per_step, 1e-9))  # a margin: the estimate is within about 10 %
        if fit < self.warmup + self.steps:
            self.warmup = min(self.warmup, max(fit - 1, 0) // 2)
            self.steps = max(min(self.steps, fit - self.warmup), 1)
            self.trimmed.update(warmup=self.warmup, steps=self.steps)
        self.trimmed["estimated_mb_per_step"] = round(per_step, 1)
        self._say("sized", mb_per_step=per_step, warmup=self.warmup, steps=self.steps)

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
        if not self.window_closed:
            self.pending = True

    def flush(self, raise_done: bool = True) -> None:
        if not self.pending or os.getpid() != self.pid:
            return
        self.pending = False
        compiled = self.probes.compile.compiled_since_last_check()  # tagged with the step that ended
        self.steps_ended += 1
        if self.prof is None:
            if not raise_done:
                return
            if self.sizing is None:  # the first step ended: size the second
                self.sizing = _Sizer(self)
                self.sizing.start()
                return
            sized = self.sizing.stop()
            if compiled and self.sizing_retries < MAX_COMPILE_WARMUP:  # the sized step was compiling: again
                self.sizing_retries += 1
                self.sizing.start()
                return
            self._fit_budget(*sized)  # a step sized: record from the next
            self._start_profiler()
            return
        if self.step_index >= self.warmup:
            self.probes.sample_window_state()
        self._close_step()
        if self.step_index == self._module_trace_step:
            self.probes.stop_module_trace()
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
        over_budget = (self.budget_s and self.step_index > self.warmup
                       and time.time() - self.started_at > self.budget_s)
        if over_budget:
            self.budget_hit = True
        if self.step_index >= self.warmup + self.steps or over_budget:
            self._close_window({"outcome": Outcome.WINDOW_COMPLETE})
            if not self.full and raise_done:
                raise WindowDone()
            return
        self._open_step()

    def _close_window(self, result: dict) -> None:
        if self.window_closed:
            return
        self.window_closed = True
        self.probes.stop_module_trace()
        self.probes.stop_sync_debug()
        self._close_step()
        trace_path = None
        if self.prof is not None:
            self._say("exporting")
            try:
                self.prof.stop()
            except Exception:
                pass
            trace_path = self._export(result)
        self.trace_path = trace_path
        self._write_result(result, trace_path)

    def _export(self, result: dict) -> str | None:
        plain = self._path("trace.json")
        final = plain + ".gz"
        try:
            self.prof.export_chrome_trace(plain)
        except Exception as exc:  # nothing recorded, or the exporter failed
            self._say("export_failed", error=str(exc))
            return None
        meta = self._meta(result)
        with open(plain, "rb") as src, gzip.open(final, "wb", compresslevel=3) as dst:
            head = src.read(1)
            while head and head.isspace():
                head = src.read(1)
            if head != b"{":
                return None
            dst.write(b'{"perfaudit": ' + json.dumps(meta).encode() + b",")
            shutil.copyfileobj(src, dst, 1 << 20)
        os.remove(plain)
        return final

    def _meta(self, result: dict) -> dict:
        return {
            "version": 1,
            "rank": self.rank,
            "world_size": int(os.environ["WORLD_SIZE"]) if self.rank is not None and "WORLD_SIZE" in os.environ else None,
            "script": os.path.abspath(self.script),
            "argv": sys.argv[1:],
            "cwd": os.getcwd(),
            "source_roots": [os.path.dirname(os.path.abspath(self.script)), os.getcwd()],
            "path_aliases": self.config.get("path_aliases") or {},
            "window": {"warmup": self.warmup, "steps": self.steps, "recorded": self.step_index,
                       "step_source": self.detector.source, "restarts": self.restarts,
                       "budget_s": self.budget_s, "budget_hit": self.budget_hit, "trimmed": self.trimmed,
                       "compile_warmup": self.compile_warmup},
            "outcome": result,
            "probes": self.probes.snapshot(),
        }

    def _write_result(self, result: dict, trace_path: str | None) -> None:
        out = {**result, "trace": trace_path, "steps_recorded": self.step_index,
               "warmup": self.warmup, "step_source": self.detector.source,
               "profiling_started": self.prof is not None, "budget_hit": self.budget_hit,
               "trimmed": self.trimmed,
               "optimizers_built": self.detector.optimizers_built}
        if self.prof is None:
            out["probes"] = self.probes.snapshot()
        tmp = self._path("result.json.tmp")
        with open(tmp, "w") as f:
            json.dump(out, f, default=str)
        os.replace(tmp, self._path("result.json"))

    def finish(self, result: dict) -> None:
        """Called once whatever happened: close the window if still open, then record the outcome."""
        if self.finished or os.getpid() != self.pid:
            return
        self.finished = True
        self.probes.stop_startup_sampling()
        if self.sizing is not None and self.prof is None and self.sizing.prof is not None:
            self.sizing.stop()
        self.flush(raise_done=False)
        if not self.window_closed:
            self._close_window(result)
        else:
            path = self._path("result.json")
            with open(path) as f:
                previous = json.load(f)
            if result["outcome"] not in (Outcome.COMPLETED, Outcome.WINDOW_COMPLETE):
                previous["after_window"] = result
            with open(path, "w") as f:
                json.dump(previous, f, default=str)
        self._say("done")


# torch.compile: the window starts after this many steps without a new compile, and warm-up (and the
# sizing step) grows by at most MAX_COMPILE_WARMUP steps for it (a frame recompiling every step would
# otherwise never let the window start; it is then measured, and reported, as it is)
QUIET_STEPS_AFTER_COMPILE = 2
MAX_COMPILE_WARMUP = 10

# bytes of uncompressed trace per recorded event (an op with its input shapes), and per Python call when
# stacks are recorded (its python_function event and those of the builtins it calls); measured on an
# op-heavy step (LSTMCell over 999 time steps: 131k events, 61 MB) and on the samples
BYTES_PER_EVENT = 420
BYTES_PER_PYTHON_CALL = 500


class _Sizer:
    """Sizes one step before the window: a light profiler (no stacks, no shapes) counts its events and
    sys.settrace counts its Python calls."""

    def __init__(self, session: Session):
        self.session, self.calls, self.prof = session, 0, None

    def _trace(self, frame, event, arg):
        self.calls += 1
        return None

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile
        torch = self.session.torch
        self.calls = 0
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        try:
            self.prof = profile(activities=activities)
            self.session.probes.own_profiler = self.prof
            self.prof.start()
        except Exception:  # sizing is an optimisation: without it the window is recorded as asked
            self.prof = None
        sys.settrace(self._trace)

    def stop(self) -> tuple[int, int]:
        sys.settrace(None)
        events = 0
        if self.prof is not None:
            try:
                self.prof.stop()
                events = len(self.prof.profiler.kineto_results.events())
            except Exception:
                events = 0
            self.prof = None
        return events, self.calls


def launched_rank() -> int | None:
    """This process's rank when torchrun (torch.distributed.run) started it, else None."""
    if "TORCHELASTIC_RUN_ID" not in os.environ and "LOCAL_RANK" not in os.environ:
        return None
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return None


def _role(optimizer) -> tuple:
    """An optimizer's role in the script: its class and first parameter, so that an optimizer rebuilt
    over the same parameters (every epoch, say) is the same one for step detection."""
    try:
        first = id(optimizer.param_groups[0]["params"][0])
    except (AttributeError, IndexError, KeyError, TypeError):
        first = id(optimizer)
    return type(optimizer).__name__, first


def _watch_parent(parent: int) -> None:
    """If perfaudit itself dies (SIGKILL), stop as on SIGTERM: write what was recorded, then exit,
    rather than train on with no parent and no timeout."""
    import threading

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="perfaudit-parent-watch", daemon=True).start()


def _run_main(script_path: str, patched: str | None) -> None:
    """`python SCRIPT`: the script as `__main__`; `verify` gives the fixed source to run in its place,
    under the script's own name (its __file__, its tracebacks, its relative paths unchanged)."""
    import runpy
    if patched is None:
        runpy.run_path(script_path, run_name="__main__")
        return
    import types
    with open(patched, encoding="utf-8") as f:
        code = compile(f.read(), script_path, "exec", dont_inherit=True)
    module = types.ModuleType("__main__")
    module.__file__, module.__builtins__ = script_path, __builtins__
    previous = sys.modules.get("__main__")
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)
    finally:
        sys.modules["__main__"] = previous


def _describe_exception(exc: BaseException) -> dict:
    return {"outcome": Outcome.RAISED, "exception": type(exc).__name__,
            "message": str(exc).splitlines()[0][:500] if str(exc) else "",
            "site": _user_frame_of(exc.__traceback__),
            "traceback": "".join(traceback.format_exception(exc))[-4000:]}


def main() -> None:
    script, *args = sys.argv[1:]
    config = json.loads(os.environ.pop("PERFAUDIT_CONFIG"))  # not a file: nothing in the script's way
    script_path = config.get("run_as") or os.path.abspath(script)
    sys.argv = [script, *args]
    # the script's folder first on sys.path, as `python SCRIPT` does (its ASCII alias, if it has one)
    aliases = config.get("path_aliases") or {}
    sys.path[0] = next((a for a in aliases if os.path.isdir(a)), os.path.dirname(script_path))
    if config.get("mode") == "timing":
        from .timing import TimingSession, seed_everything, serve_patched_sources
        session = TimingSession(config, script)
        serve_patched_sources(config.get("patched") or {})
        seed_everything(config.get("seed"))
    else:
        session = Session(config, script)
    session.install()
    session._say("running")
    try:
        _run_main(script_path, (config.get("patched") or {}).get(os.path.abspath(script_path)))
        result = {"outcome": Outcome.COMPLETED}
    except WindowDone:
        result = {"outcome": Outcome.WINDOW_COMPLETE}
    except Interrupted as exc:
        result = {"outcome": Outcome.INTERRUPTED, "signal": str(exc)}
    except Spawned as exc:
        result = {"outcome": Outcome.SPAWNED, "api": str(exc)}
    except KeyboardInterrupt:
        result = {"outcome": Outcome.INTERRUPTED, "signal": "SIGINT"}
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        result = {"outcome": Outcome.EXITED, "exit_code": code}
    except BaseException as exc:  # the user's script failed: keep what was recorded
        result = _describe_exception(exc)
    session.finish(result)
    if session.rank is not None and session.trace_path and config.get("mode") != "timing":
        try:  # under torchrun: this rank analyses its own trace, here, while the others do theirs
            from ..jobs import analyse_rank
            analyse_rank(session.trace_path, config)
        except Exception as exc:  # the parent parses the trace itself and says why
            session._say("analysis_failed", error=str(exc)[:300])
    job = config.get("job_report")
    if job and session.rank == 0:  # `torchrun -m perfaudit.launch`: rank 0 reports on the whole job
        from ..launch import job_report
        job_report(config["run_dir"], job["world_size"])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown of a half-finished training script; the runner cleans up


if __name__ == "__main__":
    # run from the imported module, not this `__main__` copy: timing.py subclasses Session and raises
    # WindowDone, which must be the very classes main() catches
    from perfaudit.collect.bootstrap import main as _main
    _main()
