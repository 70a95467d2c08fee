"""Facts from the live process that a trace cannot show.

Each probe wraps a torch entry point to note *where in the user's code* it was called and with what
settings, then calls through unchanged. Nothing in the user's script is modified.
"""
from __future__ import annotations

import functools
import os
import platform
import signal
import sys
import weakref

import torch

_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_LIB_MARKERS = ("site-packages", "dist-packages", os.sep + "lib" + os.sep + "python3")


def is_user_file(path: str) -> bool:
    """A file of the user's code: not perfaudit, torch, the standard library or an installed package."""
    return not (path.startswith("<") or path.startswith(_OWN_DIR) or path.startswith(_TORCH_DIR)
                or any(m in path for m in _LIB_MARKERS))


def user_site(depth: int = 2) -> dict | None:
    """The innermost frame of the user's code on the current stack: {path, line, func}."""
    frame = sys._getframe(depth)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return {"path": frame.f_code.co_filename, "line": frame.f_lineno, "func": frame.f_code.co_name}
        frame = frame.f_back
    return None


def _loader_settings(loader) -> dict:
    return {"num_workers": loader.num_workers, "pin_memory": loader.pin_memory,
            "persistent_workers": loader.persistent_workers, "prefetch_factor": loader.prefetch_factor,
            "batch_size": loader.batch_size}


def _wrap(owner, name: str, before):
    """Replace owner.name by a wrapper that calls before(args, kwargs) then the original."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        try:
            before(args, kwargs)
        except Exception:  # a probe must never break the user's script
            pass
        return original(*args, **kwargs)

    setattr(owner, name, wrapper)
    return original


def _tensors_nbytes(obj, depth: int = 0) -> tuple[int, bool]:
    """Bytes of the tensors in a batch and whether they are all pinned."""
    if depth > 4:
        return 0, True
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size(), bool(obj.is_pinned()) if obj.device.type == "cpu" else True
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    total, pinned = 0, True
    for item in items:
        n, p = _tensors_nbytes(item, depth + 1)
        total, pinned = total + n, pinned and p
    return total, pinned


class Probes:
    """Installs the probes and holds what they saw."""

    def __init__(self):
        self.optimizers: dict[int, dict] = {}
        self.loaders: dict[int, dict] = {}
        self.debug_calls: list[dict] = []
        self.empty_cache: dict[tuple, dict] = {}
        self.anomaly_in_window = False
        self.layer_sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.bias_before_norm: list[dict] = []
        self.module_order: list[str] = []
        self.executed: dict[tuple, int] = {}   # (path, line) -> times run, over one warm-up step
        self.startup_lines: dict = {}         # (path, line, func) -> CPU-time samples before the first step
        self.startup: dict | None = None
        self._line_trace = False
        self._outputs: dict[int, torch.nn.Module] = {}
        self._module_hook = None
        self.on_optimizer_built = lambda: None
        self.on_spawn = lambda api: None  # the script starts its training in other processes
        self.own_profiler = None          # perfaudit's profiler; every other one is neutralised
        self.data_parallel: list[dict] = []
        self.schedulers: list[dict] = []
        self.window_step = lambda: None   # returns the current step index, or None outside the window
        self.sync_debug: dict[tuple, int] = {}
        self._sync_debug = None
        self.on_batch = lambda: None
        self.before_batch = lambda: None
        from .compile_probe import CompileProbe
        self.compile = CompileProbe()
        self.ddp: list[dict] = []         # DistributedDataParallel models: options and synced forwards

    # -- installation ------------------------------------------------------------------------
    def install(self) -> None:
        _wrap(torch.optim.Optimizer, "__init__", self._optimizer_init)
        dl = torch.utils.data.DataLoader
        _wrap(dl, "__init__", self._loader_init)
        original_iter = dl.__iter__

        def __iter__(loader):
            iterator = original_iter(loader)
            try:
                iterator._perfaudit_loader = id(loader)
                # the settings it iterates with: `iter(make_loader())` keeps only the iterator alive
                self.loaders[id(loader)]["settings"] = _loader_settings(loader)
            except Exception:
                pass
            return iterator

        dl.__iter__ = __iter__
        it = torch.utils.data.dataloader._BaseDataLoaderIter
        original_next = it.__next__
        probes = self

        def __next__(self_it):
            probes.before_batch()
            batch = original_next(self_it)
            try:
                probes._batch(self_it, batch)
            except Exception:
                pass
            return batch

        it.__next__ = __next__
        for owner, name in ((torch.nn.modules.conv._ConvNd, "__init__"), (torch.nn.Linear, "__init__")):
            self._track_layer_site(owner, name)
        self._debug(torch.autograd.set_detect_anomaly, "__init__", "set_detect_anomaly",
                    lambda a, k: bool(a[1] if len(a) > 1 else k.get("mode", True)))
        self._debug(torch.autograd.detect_anomaly, "__init__", "detect_anomaly", lambda a, k: True)
        self._neutralise_profilers()
        for fn in ("gradcheck", "gradgradcheck"):
            self._debug_function(torch.autograd, fn)
        _wrap(torch.cuda, "empty_cache", self._empty_cache)
        _wrap(torch.nn.DataParallel, "__init__", lambda a, k: self.data_parallel.append(
            {"site": user_site(3), "class": type(a[0]).__name__}))
        import torch.multiprocessing as tmp
        for name in ("spawn", "start_processes"):
            if hasattr(tmp, name):
                self._guard_spawn(tmp, name)
        _wrap(torch.optim.lr_scheduler.LRScheduler, "__init__", lambda a, k: self.schedulers.append(
            {"site": user_site(3), "class": type(a[0]).__name__}))
        self.compile.install()
        self._watch_ddp()

    # -- DistributedDataParallel: its options, and how often its forward asks for gradient sync --------
    def _watch_ddp(self) -> None:
        from torch.nn.parallel import DistributedDataParallel as DDP
        probes = self

        def record(args, kwargs):
            model = args[0]
            self.ddp.append({"site": user_site(3), "_ref": weakref.ref(model), "sync_forwards": 0,
                             "nosync_forwards": 0, "window_sync_forwards": 0, "window_nosync_forwards": 0})
            model._perfaudit_ddp = len(self.ddp) - 1

        _wrap(DDP, "__init__", record)
        original_forward = DDP.forward

        @functools.wraps(original_forward)
        def forward(model, *args, **kwargs):
            try:
                info = probes.ddp[model._perfaudit_ddp]
                sync = "sync_forwards" if model.require_backward_grad_sync else "nosync_forwards"
                info[sync] += 1
                if probes.window_step() is not None:
                    info["window_" + sync] += 1
            except Exception:
                pass
            return original_forward(model, *args, **kwargs)

        DDP.forward = forward

    def _ddp_snapshot(self) -> list[dict]:
        out = []
        for info in self.ddp:
            entry = {k: v for k, v in info.items() if not k.startswith("_")}
            model = info["_ref"]()
            if model is not None:
                try:  # DDP's own record: options, backend, and the parameters that got no gradient
                    data = model._get_ddp_logging_data()
                    entry.update(find_unused_parameters=bool(data.get("find_unused_parameters")),
                                 gradient_as_bucket_view=bool(data.get("gradient_as_bucket_view")),
                                 backend=str(data.get("backend_name", "")),
                                 unused_parameter_size=data.get("unused_parameter_size"))
                except Exception:
                    entry.update(find_unused_parameters=bool(getattr(model, "find_unused_parameters", False)),
                                 gradient_as_bucket_view=bool(getattr(model, "gradient_as_bucket_view", False)))
                params = [p for p in model.parameters() if p.requires_grad]
                entry["param_device"] = params[0].device.type if params else None
                entry["param_bytes"] = sum(p.numel() * p.element_size() for p in params)
                entry["params_without_grad"] = sum(1 for p in params if p.grad is None)
            out.append(entry)
        return out

    def _neutralise_profilers(self) -> None:
        """A profiler the script starts itself (torch.profiler, the legacy autograd profiler,
        emit_nvtx) would fight perfaudit's for the one Kineto session: record where it was
        started (a debug API left on, T07) and make it a no-op, so the audit goes on."""
        from torch.autograd.profiler_util import EventList
        probes = self

        def note(api):
            site = user_site(4)
            if not any(c["api"] == api and c["site"] == site for c in probes.debug_calls):
                probes.debug_calls.append({"api": api, "enabled": True, "site": site})

        kineto = torch.profiler.profile
        for name in ("start", "stop", "step", "export_chrome_trace", "export_stacks", "export_memory_timeline"):
            original = getattr(kineto, name)

            def guarded(prof, *args, _original=original, _name=name, **kwargs):
                if prof is probes.own_profiler:
                    return _original(prof, *args, **kwargs)
                if _name == "start":
                    note("torch.profiler.profile")
                return None

            setattr(kineto, name, guarded)
        kineto.key_averages = lambda prof, *a, **k: EventList([])
        kineto.events = lambda prof: EventList([])
        legacy = torch.autograd.profiler.profile
        legacy_enter, legacy_exit = legacy.__enter__, legacy.__exit__

        def own(prof) -> bool:  # torch.profiler drives an autograd profiler of its own
            return prof is getattr(probes.own_profiler, "profiler", None)

        def guarded_enter(prof):
            if own(prof):
                return legacy_enter(prof)
            note("torch.autograd.profiler.profile")
            prof.function_events = EventList([])
            return prof

        legacy.__enter__ = guarded_enter
        legacy.__exit__ = lambda prof, *exc: legacy_exit(prof, *exc) if own(prof) else False
        nvtx = torch.autograd.profiler.emit_nvtx

        def nvtx_enter(ctx):
            if getattr(ctx, "enabled", True):
                note("emit_nvtx")
            return ctx

        nvtx.__enter__ = nvtx_enter
        nvtx.__exit__ = lambda ctx, *exc: False

    def _guard_spawn(self, module, name):
        """torch.multiprocessing.spawn starts fresh interpreters that perfaudit does not watch: say so at
        once instead of waiting for a timeout."""
        original = getattr(module, name)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            self.on_spawn(f"torch.multiprocessing.{name}")
            return original(*args, **kwargs)

        setattr(module, name, wrapper)

    def _track_layer_site(self, owner, name):
        def before(args, kwargs):
            site = user_site(3)
            if site and args:
                self.layer_sites[args[0]] = site
        _wrap(owner, name, before)

    def _debug(self, owner, name, api, enabled):
        def before(args, kwargs):
            self.debug_calls.append({"api": api, "enabled": enabled(args, kwargs), "site": user_site(3)})
        _wrap(owner, name, before)

    def _debug_function(self, module, name):
        def before(args, kwargs):
            self.debug_calls.append({"api": name, "enabled": True, "site": user_site(3)})
        _wrap(module, name, before)

    # -- probe callbacks -----------------------------------------------------------------------
    def _optimizer_init(self, args, kwargs):
        opt = args[0]
        if id(opt) not in self.optimizers:
            self.optimizers[id(opt)] = {"class": type(opt).__name__, "site": user_site(3), "_ref": opt}
            self.on_optimizer_built()

    def _loader_init(self, args, kwargs):
        self.loaders[id(args[0])] = {"site": user_site(3), "_ref": weakref.ref(args[0]),
                                     "batches": 0, "window_batches": 0, "batch_bytes": 0, "pinned": True}

    def _batch(self, iterator, batch):
        info = self.loaders.get(getattr(iterator, "_perfaudit_loader", None))
        if info is not None:
            nbytes, pinned = _tensors_nbytes(batch)
            info["batches"] += 1
            if self.window_step() is not None:
                info["window_batches"] += 1
            info["batch_bytes"] = max(info["batch_bytes"], nbytes)
            info["pinned"] = info["pinned"] and pinned
        self.on_batch()

    def _empty_cache(self, args, kwargs):
        site = user_site(3) or {}
        key = (site.get("path"), site.get("line"))
        entry = self.empty_cache.setdefault(key, {"site": site, "calls": 0, "window_calls": 0})
        entry["calls"] += 1
        if self.window_step() is not None:
            entry["window_calls"] += 1

    # -- module order over one step --------------------------------------------------------------
    def start_module_trace(self) -> None:
        norm_types = (torch.nn.modules.batchnorm._BatchNorm,)
        layer_types = (torch.nn.modules.conv._ConvNd, torch.nn.Linear)

        def hook(module, inputs, output):
            if len(self.module_order) < 5000:
                self.module_order.append(type(module).__name__)
            if isinstance(module, layer_types) and isinstance(output, torch.Tensor):
                self._outputs[id(output)] = (module, output)
            elif isinstance(module, norm_types) and inputs and isinstance(inputs[0], torch.Tensor):
                producer = self._outputs.get(id(inputs[0]))
                if producer and producer[1] is inputs[0] and getattr(producer[0], "bias", None) is not None:
                    layer = producer[0]
                    entry = {"layer": type(layer).__name__, "norm": type(module).__name__,
                             "bias_params": int(layer.bias.numel()), "site": self.layer_sites.get(layer)}
                    if entry not in self.bias_before_norm:
                        self.bias_before_norm.append(entry)

        self._module_hook = torch.nn.modules.module.register_module_forward_hook(hook)

    def stop_module_trace(self) -> None:
        if self._module_hook is not None:
            self._module_hook.remove()
            self._module_hook = None
        self._outputs.clear()
        self.stop_line_trace()

    # -- what the script does before its first step (T29), sampled without the profiler -----------
    def start_startup_sampling(self, interval: float = 0.01) -> None:
        """Every `interval` s of CPU time, note the user line running (SIGPROF): cheap enough to run
        from the script's start to its first step, however long that takes."""
        import time
        counts = self.startup_lines
        self._startup_t0 = time.time()

        def sample(signum, frame):
            in_model = False   # inside a module's forward: the model computing, not preparation
            importing = False  # a module being imported (often lazily, by torch itself): not preparation
            while frame is not None and not is_user_file(frame.f_code.co_filename):
                in_model = in_model or frame.f_code.co_name in ("_call_impl", "_wrapped_call_impl")
                importing = importing or frame.f_code.co_filename.startswith("<frozen importlib")
                frame = frame.f_back
            if frame is not None and importing:
                counts["import"] = counts.get("import", 0) + 1
            elif frame is not None and in_model:
                counts["model"] = counts.get("model", 0) + 1
            elif frame is not None:
                key = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
                counts[key] = counts.get(key, 0) + 1
            else:
                counts[None] = counts.get(None, 0) + 1

        try:
            signal.signal(signal.SIGPROF, sample)
            signal.setitimer(signal.ITIMER_PROF, interval, interval)
            self._startup_interval = interval
        except (ValueError, OSError, AttributeError):  # not the main thread, or no SIGPROF here
            self._startup_interval = None

    def stop_startup_sampling(self) -> None:
        import time
        if getattr(self, "_startup_interval", None) is None or self.startup is not None:
            return
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, signal.SIG_DFL)
        total = sum(self.startup_lines.values())
        top = sorted(((n, k) for k, n in self.startup_lines.items() if isinstance(k, tuple)), reverse=True)[:10]
        self.startup = {"seconds": time.time() - self._startup_t0, "cpu_seconds": total * self._startup_interval,
                        "samples": total, "model_samples": self.startup_lines.get("model", 0),
                        "import_samples": self.startup_lines.get("import", 0),
                        "lines": [{"path": p, "line": l, "func": f, "samples": n} for n, (p, l, f) in top]}

    # -- which lines of the user's code run in a step (the locator counts only those) ------------
    def start_line_trace(self) -> None:
        """Line events for the user's files only, over one warm-up step: a branch never taken in a
        step (an `except StopIteration`, a logging interval) is then never reported as running."""
        executed, user = self.executed, {}

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

        frame = sys._getframe(1)
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
        if not torch.cuda.is_available() or self._sync_debug is not None:
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

    def sample_window_state(self) -> None:
        self.anomaly_in_window = self.anomaly_in_window or torch.is_anomaly_enabled()

    # -- export ----------------------------------------------------------------------------------
    def snapshot(self) -> dict:
        optimizers = []
        for info in self.optimizers.values():
            opt = info["_ref"]
            defaults = {k: v for k, v in getattr(opt, "defaults", {}).items()
                        if isinstance(v, (bool, int, float, str, type(None)))}
            n_params = sum(len(g["params"]) for g in getattr(opt, "param_groups", []))
            optimizers.append({"class": info["class"], "site": info["site"], "options": defaults,
                               "param_tensors": n_params})
        loaders = []
        for info in self.loaders.values():
            loader = info["_ref"]()
            settings = _loader_settings(loader) if loader is not None else info.get("settings")
            if settings is None or not info["batches"]:
                continue
            loaders.append({
                "site": info["site"], **settings, "batches_seen": info["batches"],
                "window_batches": info["window_batches"],
                "batch_bytes": info["batch_bytes"], "batch_pinned": info["pinned"],
            })
        return {
            "optimizers": optimizers,
            "dataloaders": loaders,
            "debug_apis": self.debug_calls,
            "anomaly_enabled_in_window": self.anomaly_in_window,
            "empty_cache": list(self.empty_cache.values()),
            "bias_before_norm": self.bias_before_norm,
            "data_parallel": self.data_parallel,
            "schedulers": self.schedulers,
            "sync_debug": [{"path": p, "line": l, "count": n} for (p, l), n in self.sync_debug.items()],
            "module_order": self.module_order[:200],
            "startup": self.startup,
            "compile": self.compile.snapshot(),
            "ddp": self._ddp_snapshot(),
            "executed_lines": [{"path": p, "line": l, "count": n} for (p, l), n in self.executed.items()],
            "environment": environment(),
        }


def environment() -> dict:
    cuda = torch.cuda.is_available()
    env = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cuda_available": cuda,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cudnn_enabled": torch.backends.cudnn.enabled,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "device": "cpu",
    }
    if cuda:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        env.update(device="cuda", device_name=props.name, capability=f"{props.major}.{props.minor}",
                   device_memory=props.total_memory)
    return env
