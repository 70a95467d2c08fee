"""Facts from the live process that a trace cannot show.

Each probe wraps a torch entry point to note *where in the user's code* it was called and with what
settings, then calls through unchanged. Nothing in the user's script is modified.
"""
from __future__ import annotations

import sys
import weakref
from types import FrameType

import torch

from ..emulation.cuda_shim import gpu_present
from ..internal import record_internal_error
from ..spawn import guard_spawn
from ..userframes import is_user_file, library_caller, user_site
from ..window.profilers import neutralise_profilers
from ..wrap import patch, wrap
from . import worker_timing
from .ddp import DDPProbe
from .environment import environment
from .loader import LoaderProbes, loader_settings
from .memory_history import MemoryHistory


class Probes(LoaderProbes):
    """Installs the probes and holds what they saw."""

    def __init__(self):
        self.optimizers: dict[int, dict] = {}
        self.loaders: dict[int, dict] = {}
        self.debug_calls: list[dict] = []
        self.empty_cache: dict[tuple, dict] = {}
        self.anomaly_in_window = False
        self.memory_history = MemoryHistory(self.debug_calls)
        self.layer_sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.bias_before_norm: list[dict] = []
        self._biased_layers: dict[int, torch.nn.Module] = {}  # Conv/Linear with a bias that ran in the step
        self._feeding_norm: set[int] = set()                  # ... and those whose output went into a BatchNorm
        self.module_order: list[str] = []
        self.executed: dict[tuple, int] = {}   # (path, line) -> times run, over one warm-up step
        self._line_trace = False
        self._outputs: dict[int, tuple] = {}  # id(output) -> (layer, weak ref to the output, input shape)
        self._module_hook = None
        self.on_optimizer_built = lambda: None
        self.on_spawn = lambda api: None  # the script starts its training in other processes
        self.spawned_inline: list[dict] = []  # a one-process spawn whose function ran here (collect/spawn.py)
        self.own_profiler = None          # perfaudit's profiler; every other one is neutralised
        self.data_parallel: list[dict] = []
        self.schedulers: list[dict] = []
        self.flag_sets: list[dict] = []   # cudnn flags the script set: {flag, value, site}
        self.window_step = lambda: None   # returns the current step index, or None outside the window
        self.sync_debug: dict[tuple, int] = {}
        self._sync_debug = None
        self.on_batch = lambda loader_id: None
        self.on_iter = lambda loader_id: None
        self.before_batch = lambda: None
        self.fetch_s = 0.0                # wall seconds spent in DataLoader fetches, all told (plain.py reads it)
        self.fetch_wait_s = 0.0           # ... of which waiting for a CPU, while `wait_clock` is set
        self.wait_clock = None            # () -> the fetching thread's run-queue wait (s), while plain steps are timed
        self.worker_dir: str | None = None  # where DataLoader workers leave their batch times
        self.placement = None             # the emulated CUDA device (emulate.py), when there is one
        self.device_memory = None         # its memory over one warm-up step (device_memory.py)
        self.oom_watch = None             # on a GPU: what held its memory if the script runs out (oom.py)
        self.ddp = DDPProbe(self)         # DistributedDataParallel models: options and synced forwards
        # probes of other modules, added by the session before install() (the compile probe, the
        # start-up sampler): each has install() and snapshot(), reported under its name
        self.extra: dict[str, object] = {}

    def add(self, name: str, probe) -> None:
        self.extra[name] = probe

    # -- installation ------------------------------------------------------------------------
    def install(self) -> None:
        wrap(torch.optim.Optimizer, "__init__", self._optimizer_init)
        self._install_loader_probes()
        for owner, name in ((torch.nn.modules.conv._ConvNd, "__init__"), (torch.nn.Linear, "__init__")):
            self._track_layer_site(owner, name)
        self._debug(torch.autograd.set_detect_anomaly, "__init__", "set_detect_anomaly",
                    lambda a, k: bool(a[1] if len(a) > 1 else k.get("mode", True)))
        self._debug(torch.autograd.detect_anomaly, "__init__", "detect_anomaly", lambda a, k: True)
        neutralise_profilers(self)
        self.memory_history.install()
        for fn in ("gradcheck", "gradgradcheck"):
            self._debug_function(torch.autograd, fn)
        wrap(torch.cuda, "empty_cache", self._empty_cache)
        wrap(torch.nn.DataParallel, "__init__", lambda a, k: self.data_parallel.append(
            {"site": user_site(3), "class": type(a[0]).__name__}))
        import torch.multiprocessing as tmp
        for name in ("spawn", "start_processes"):
            if hasattr(tmp, name):
                guard_spawn(tmp, name, self.spawned_inline, lambda api: self.on_spawn(api))
        wrap(torch.optim.lr_scheduler.LRScheduler, "__init__", lambda a, k: self.schedulers.append(
            {"site": user_site(3), "class": type(a[0]).__name__}))
        self.ddp.install()
        self._watch_flags()
        if self.worker_dir:
            try:
                worker_timing.install(self.worker_dir)
            except Exception as exc:
                record_internal_error("DataLoader worker timing", exc)
        for probe in self.extra.values():
            install = getattr(probe, "install", None)
            if install is not None:
                install()

    def _watch_flags(self) -> None:
        """Where the script sets torch.backends.cudnn.benchmark / .deterministic, and to what: the lines
        that ran (a flag set in a branch not taken is never reported as set, nor edited by `fix`)."""
        from torch.backends import ContextProp, cudnn
        probes = self
        cls = type(cudnn)
        for name in ("benchmark", "deterministic"):
            original = vars(cls).get(name)
            if not isinstance(original, ContextProp):
                continue

            class Watched(ContextProp):
                def __set__(self, obj, value, _original=original, _name=name):
                    try:
                        probes.flag_sets.append({"flag": f"cudnn.{_name}", "value": bool(value), "site": user_site(2)})
                    except Exception as exc:  # noqa: BLE001
                        record_internal_error("flag probe", exc)
                    _original.__set__(obj, value)

            watched = Watched.__new__(Watched)
            watched.__dict__.update(original.__dict__)
            patch(cls, name, watched)

    def _track_layer_site(self, owner, name):
        def before(args, kwargs):
            site = user_site(3)
            if site and args:
                self.layer_sites[args[0]] = site
        wrap(owner, name, before)

    def _debug(self, owner, name, api, enabled):
        def before(args, kwargs):
            self.debug_calls.append({"api": api, "enabled": enabled(args, kwargs), "site": user_site(3)})
        wrap(owner, name, before)

    def _debug_function(self, module, name):
        def before(args, kwargs):
            self.debug_calls.append({"api": name, "enabled": True, "site": user_site(3)})
        wrap(module, name, before)

    # -- probe callbacks -----------------------------------------------------------------------
    def _optimizer_init(self, args, kwargs, site: dict | None | bool = False):
        opt = args[0]
        if id(opt) not in self.optimizers:
            site, built_in = (user_site(3), library_caller(3)) if site is False else (site, None)
            self.optimizers[id(opt)] = {"class": type(opt).__name__, "site": site, "_ref": opt,
                                        "built_in": built_in}
            self.on_optimizer_built()

    def optimizer_stepping(self, opt) -> None:
        """An optimizer steps: one built before the session (a callback's) is taken in, its site unknown."""
        if id(opt) not in self.optimizers:
            self._optimizer_init((opt,), {}, site=None)

    def _empty_cache(self, args, kwargs):
        site = user_site(3) or {}
        key = (site.get("path"), site.get("line"))
        entry = self.empty_cache.setdefault(key, {"site": site, "calls": 0, "window_calls": 0, "by_step": {}})
        entry["calls"] += 1
        step = self.window_step()
        if step is not None:  # by step: the report counts the measured steps' calls alone
            entry["window_calls"] += 1
            entry["by_step"][str(step)] = entry["by_step"].get(str(step), 0) + 1

    # -- module order over one step --------------------------------------------------------------
    def start_module_trace(self) -> None:
        norm_types = (torch.nn.modules.batchnorm._BatchNorm,)
        layer_types = (torch.nn.modules.conv._ConvNd, torch.nn.Linear)

        def hook(module, inputs, output):
            if len(self.module_order) < 5000:
                self.module_order.append(type(module).__name__)
            if isinstance(module, layer_types) and isinstance(output, torch.Tensor):
                # weakly: a strong reference kept every layer's output alive to the step's end (on a GPU
                # too: the traced step's memory grew by the model's activations)
                shape = list(inputs[0].shape) if inputs and isinstance(inputs[0], torch.Tensor) else None
                self._outputs[id(output)] = (module, weakref.ref(output), shape)
                if getattr(module, "bias", None) is not None:
                    self._biased_layers[id(module)] = module
            elif isinstance(module, norm_types) and inputs and isinstance(inputs[0], torch.Tensor):
                producer = self._outputs.get(id(inputs[0]))
                if producer and producer[1]() is inputs[0] and getattr(producer[0], "bias", None) is not None:
                    layer = producer[0]
                    if id(layer) not in self._feeding_norm:  # each layer once (not each equal one: a helper's)
                        self._feeding_norm.add(id(layer))
                        # the shapes the trace records for its ops: which convolutions and bias gradients are
                        # the layer's (BN001's projected saving, facts/gpu/projection.py)
                        self.bias_before_norm.append({"layer": type(layer).__name__, "norm": type(module).__name__,
                                                      "bias_params": int(layer.bias.numel()),
                                                      "site": self.layer_sites.get(layer), "input_shape": producer[2],
                                                      "weight_shape": list(layer.weight.shape),
                                                      "output_shape": list(inputs[0].shape)})

        self._module_hook = torch.nn.modules.module.register_module_forward_hook(hook)

    def _bias_without_norm(self) -> list[dict]:
        """Layers with a bias that ran in the traced step with no BatchNorm after them, by the line that built
        them: a line that builds both kinds (a helper called with and without a norm) is not for a
        mechanical bias=False."""
        by_site: dict[tuple, dict] = {}
        for key, layer in self._biased_layers.items():
            site = self.layer_sites.get(layer)
            if key in self._feeding_norm or not site:
                continue
            entry = by_site.setdefault((site.get("path"), site.get("line"), type(layer).__name__),
                                       {"layer": type(layer).__name__, "site": site, "count": 0})
            entry["count"] += 1
        return list(by_site.values())

    def start_device_memory(self) -> None:
        """Over the last two warm-up steps (a whole iteration inside, wherever its step boundary falls)."""
        if self.device_memory is None:
            return
        if self.placement is None or not self.placement.aside:  # a real GPU, or the emulated device in use
            self.device_memory.start()

    def stop_module_trace(self) -> None:
        if self.device_memory is not None:
            self.device_memory.stop()
        if self.oom_watch is not None:  # the allocator's stacks are not recorded in the measured steps (their cost)
            self.oom_watch.pause()
        if self._module_hook is not None:
            self._module_hook.remove()
            self._module_hook = None
        self._outputs.clear()
        self.stop_line_trace()

    # -- which lines of the user's code run in a step (the locator counts only those) ------------
    def start_line_trace(self) -> None:
        """Line events for the user's files only, over one warm-up step: a branch never taken in a
        step (an `except StopIteration`, a logging interval) is then never reported as running."""
        executed = self.executed
        user: dict = {}

        def local(frame, event, arg):
            if event == "line" and len(executed) < 20000:
                key = (frame.f_code.co_filename, frame.f_lineno)
                executed[key] = executed.get(key, 0) + 1
            return local

        def global_trace(frame, event, arg):
            code = frame.f_code
            mine = user.get(code)
            if mine is None:
                mine = user[code] = is_user_file(code.co_filename)
            return local if mine else None

        frame: FrameType | None = sys._getframe(1)
        while frame is not None:  # the training loop's frame is already running: trace it too
            if is_user_file(frame.f_code.co_filename):
                frame.f_trace, frame.f_trace_lines = local, True
            frame = frame.f_back
        sys.settrace(global_trace)
        self._line_trace = True

    def stop_line_trace(self) -> None:
        if self._line_trace:
            sys.settrace(None)
            self._line_trace = False

    def start_sync_debug(self) -> None:
        """On a GPU, let torch itself flag synchronising calls (set_sync_debug_mode("warn")) and note
        the user line of each warning: confirmation of the syncs the trace shows."""
        if not gpu_present() or self._sync_debug is not None:
            return
        import warnings
        previous = warnings.showwarning

        def showwarning(message, category, filename, lineno, file=None, line=None):
            if "synchroniz" in str(message):
                site = user_site(2) or {"path": filename, "line": lineno}
                key = (site["path"], site["line"])
                self.sync_debug[key] = self.sync_debug.get(key, 0) + 1
                return
            previous(message, category, filename, lineno, file, line)

        warnings.showwarning = showwarning
        warnings.simplefilter("always", UserWarning)
        self._sync_debug = previous
        torch.cuda.set_sync_debug_mode("warn")

    def stop_sync_debug(self) -> None:
        if self._sync_debug is not None:
            import warnings
            torch.cuda.set_sync_debug_mode("default")
            warnings.showwarning = self._sync_debug
            self._sync_debug = None

    def before_profiling(self) -> None:
        """What a snapshot would otherwise first do under the profiler (which records every call), done now."""
        _user_modules()

    def sample_window_state(self) -> None:
        self.anomaly_in_window = self.anomaly_in_window or torch.is_anomaly_enabled()
        self.memory_history.sample()

    # -- export ----------------------------------------------------------------------------------
    def snapshot(self, profiling: bool = False) -> dict:
        """What the probes saw. `profiling`: the profiler still records every call made here; a probe whose
        snapshot computes much (`costly_snapshot`: the device memory's replay) waits for its stop (None here)."""
        optimizers = []
        for info in self.optimizers.values():
            opt = info["_ref"]
            defaults = {k: v for k, v in getattr(opt, "defaults", {}).items()
                        if isinstance(v, (bool, int, float, str, type(None)))}
            groups = getattr(opt, "param_groups", [])
            n_params = sum(len(g["params"]) for g in groups)
            params = [p for g in groups for p in g["params"] if isinstance(p, torch.Tensor)]
            entry = {"class": info["class"], "site": info["site"], "options": defaults, "param_tensors": n_params,
                     "param_numel": sum(p.numel() for p in params), "built_in": info.get("built_in"),
                     "param_bytes": sum(p.numel() * p.element_size() for p in params)}
            if self.placement is not None:  # torch chose its implementation as on CUDA for these
                entry["on_emulated_device"] = any(self.placement.on_device.has(p) for g in opt.param_groups
                                                  for p in g["params"])
            optimizers.append(entry)
        loaders = []
        timed = worker_timing.read(self.worker_dir) if self.worker_dir else {}
        for info in self.loaders.values():
            loader = info["_ref"]()
            settings = loader_settings(loader) if loader is not None else info.get("settings")
            if settings is None or not info["batches"]:
                continue
            settings = dict(settings)
            workers = timed.get(settings.pop("_dataset", None))
            loaders.append({
                "site": info["site"], **settings, "batches_seen": info["batches"],
                "window_batches": info["window_batches"],
                "window_batches_by_step": dict(info.get("window_batches_by_step") or {}),
                "batch_bytes": info["batch_bytes"], "batch_pinned": info["pinned"],
                "batches_on_device": bool(info.get("on_device")),
                # the workers' own time to make a batch (worker_timing.py), when they were timed
                "worker_ms_per_batch": 1000.0 * workers["own_s"] / workers["batches"] if workers else None,
                "worker_wall_ms_per_batch": 1000.0 * workers["wall_s"] / workers["batches"] if workers else None,
                "worker_cpu_ms_per_batch": 1000.0 * workers["cpu_s"] / workers["batches"] if workers else None,
            })
        return {
            "optimizers": optimizers,
            "dataloaders": loaders,
            "debug_apis": self.debug_calls,
            "anomaly_enabled_in_window": self.anomaly_in_window,
            "memory_history_in_window": self.memory_history.in_window,
            "empty_cache": list(self.empty_cache.values()),
            "bias_before_norm": self.bias_before_norm,
            "bias_without_norm": self._bias_without_norm(),
            "data_parallel": self.data_parallel,
            "spawned_inline": self.spawned_inline,
            "schedulers": self.schedulers,
            "flag_sets": self.flag_sets[:50],
            "user_files": _user_modules(),
            "sync_debug": [{"path": p, "line": l, "count": n} for (p, l), n in self.sync_debug.items()],
            "module_order": self.module_order[:200],
            "ddp": self.ddp.snapshot(),
            **{name: None if profiling and getattr(probe, "costly_snapshot", False) else _snapshot(probe)
               for name, probe in self.extra.items()},
            "executed_lines": [{"path": p, "line": l, "count": n} for (p, l), n in self.executed.items()],
            "environment": environment(),
        }


def _snapshot(probe):
    try:
        return probe.snapshot()
    except Exception as exc:  # perfaudit's own error: that probe's data is left out, the rest kept
        record_internal_error(type(probe).__name__, exc)
        return None


_SEEN_MODULES: set[str] = set()
_USER_MODULES: set[str] = set()


def _user_modules() -> list[str]:
    """The user's own modules the script imported (a helper that picks the device, say), by path; each module
    looked at once (a snapshot under the profiler records every call it makes)."""
    for name in sys.modules.keys() - _SEEN_MODULES:
        _SEEN_MODULES.add(name)
        path = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(path, str) and path.endswith(".py") and is_user_file(path):
            _USER_MODULES.add(path)
    return sorted(_USER_MODULES)[:200]
