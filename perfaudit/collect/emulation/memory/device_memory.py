"""Device memory on the emulated CUDA path, over one step: what a GPU would hold, without a GPU.

For the last two warm-up steps (so that one whole iteration, forward to update, lies inside wherever the
step boundary falls; no measured step pays for it) a TorchDispatchMode sees every aten op,
forward, the autograd engine's backward and the optimizer's update alike, and notes each storage that an op
on device tensors makes: its bytes as the caching allocator rounds them (512 B), when it came and when it
went (a weakref on the storage), what it is (saved for backward, a gradient, optimizer state, a batch, a
temporary) and the user's line that made it. What was on the device before the step (parameters,
gradients, optimizer state, kept tensors) is counted from the placement registry. The peak is replayed
from that timeline; reserved memory from the same timeline replayed through a model of the caching
allocator (caching_allocator.py: its segments, best fit, splits and merges), from the device as the tracked
steps found it (how it got there, the model's loading, is not replayed: its free cached blocks are unknown).
"""
from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ...internal import record_internal_error
from ...userframes import user_site
from .caching_allocator import CachingAllocator
from .saved_tensors import saved_tensors_watch

ROUND = 512
CATEGORIES = ("parameters", "gradients", "optimizer state", "activations", "batches", "temporaries", "other")
# the ops torch runs through cuBLAS on a GPU: each thread that runs one gets a handle and a workspace from
# the caching allocator, kept for the process's life (ATen's CublasHandlePool.cpp). Under inference_mode the
# composite ones (linear, matmul, einsum) reach the dispatcher whole, not as the mm/addmm they become
_aten = torch.ops.aten
CUBLAS_OPS = frozenset(getattr(_aten, name).default for name in (
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "_addmm_activation", "addmm_", "baddbmm_",
    "addbmm_", "addmv_", "dot", "vdot", "linear", "matmul", "einsum", "_scaled_mm")
    if hasattr(getattr(_aten, name, None), "default"))


# ops that run through cuDNN on a GPU, whose workspace comes from the caching allocator for the call and is
# not modelled here: what the estimate leaves out (facts: memory.emulated; recurrent layers, which reach the
# dispatcher already decomposed on a CPU, by their modules)
CUDNN_OPS = {getattr(_aten, name).default: kind for name, kind in (
    ("convolution", "convolutions"), ("_convolution", "convolutions"), ("convolution_backward", "convolutions"),
    ("mkldnn_convolution", "convolutions")) if hasattr(getattr(_aten, name, None), "default")}


def rounded(nbytes: int) -> int:
    return -(-nbytes // ROUND) * ROUND


def _key(t: torch.Tensor):
    try:
        storage = t.untyped_storage()
        return storage.data_ptr(), storage
    except Exception:  # noqa: BLE001 - a tensor without storage (meta, sparse)
        return None, None


def _tensors(*groups):
    for group in groups:
        for a in group:
            if isinstance(a, torch.Tensor):
                yield a
            elif isinstance(a, (list, tuple)):
                for b in a:
                    if isinstance(b, torch.Tensor):
                        yield b


# an empty_cache() call in the tracked steps' timeline (cache_emptied): no tensor's record
EMPTIED: dict = {"device": False, "bytes": 0, "category": "none", "site": None}


class _Tracker(TorchDispatchMode):
    def __init__(self, memory: DeviceMemory):
        super().__init__()
        self.memory = memory

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        try:
            self.memory.op(func, args, kwargs, out)
        except Exception as exc:  # noqa: BLE001 - a record must never break the step
            record_internal_error("device memory", exc)
        return out


class DeviceMemory:
    """One step's device memory on the emulated device; `snapshot()` is what the report reads."""

    costly_snapshot = True  # its replay runs once the profiler stopped (Probes.snapshot)

    def __init__(self, placement, optimizers):
        self.placement = placement
        self.optimizers = optimizers  # () -> the optimizers the script built
        self.records: dict = {}      # storage key -> record
        self.timeline: list = []     # (+1 | -1, record)
        self.baseline_records: list[dict] = []
        self.result: dict | None = None
        self._ended: list | None = None  # the timeline as the tracked steps left it, until replayed
        self._quick_peak: int | None = None
        self._baseline_keys: set = set()
        self._mode = None
        self._saved = None
        # forward and backward run cuBLAS from different threads on a GPU (autograd's device thread): a
        # workspace each; on the emulated device backward runs on the caller's thread, so the pass is noted
        self.cublas_passes: set[str] = set()
        self.cudnn: set[str] = set()  # what ran that cuDNN serves on a GPU (CUDNN_OPS)
        self._attention = False  # an attention runs the CPU's math path, forward or backward (attention.py)

    # -- the step --------------------------------------------------------------------------------
    def start(self) -> None:
        if self._mode is not None or self.result is not None or self._ended is not None:
            return
        try:
            self._count_baseline()
            self._saved = saved_tensors_watch(self._packed)
            self._saved.__enter__()
            self._mode = _Tracker(self)
            self._mode.__enter__()
            self.placement.memory = self
        except Exception as exc:  # noqa: BLE001
            record_internal_error("device memory", exc)

    def stop(self) -> None:
        if self._mode is None:
            return
        self.placement.memory = None
        try:
            self._mode.__exit__(None, None, None)
            self._saved.__exit__(None, None, None)
            self._mode = None
            self._final_categories()  # what the step's allocations turned out to be, as it ended
            self._ended = list(self.timeline)  # frees after the step are not its own
        except Exception as exc:  # noqa: BLE001
            record_internal_error("device memory", exc)
            self._mode = None

    def op(self, func, args, kwargs, out) -> None:
        # every aten op of the tracked steps passes here (and the profiler records each Python frame):
        # a plain walk of the arguments, no pytree
        for a in _tensors(args, kwargs.values() if kwargs else ()):
            if self._on_device(a):
                break
        else:
            return
        if func in CUBLAS_OPS:
            self.cublas_passes.add("backward" if torch._C._current_autograd_node() is not None else "forward")
        elif func in CUDNN_OPS:
            self.cudnn.add(CUDNN_OPS[func])
        if isinstance(out, torch.Tensor):
            self._allocated(out, "temporaries")
        elif isinstance(out, (list, tuple)):
            for t in out:
                if isinstance(t, torch.Tensor):
                    self._allocated(t, "temporaries")

    def placed(self, t: torch.Tensor, category: str = "other") -> None:
        """The placement mode put `t` on the device in the tracked step (a copy of a batch, a factory
        with device=): its storage is device memory from its allocation on."""
        if self._mode is None:
            return
        key, _ = _key(t)
        record = self.records.get(key)
        if record is None:
            self._allocated(t, category)
        else:
            record["device"] = True
            if record["category"] == "temporaries":
                record["category"] = category

    # -- an attention kernel (attention.py) ---------------------------------------------------------
    def in_kernel(self, running: bool) -> None:
        """An attention runs the CPU's math path (forward, or its backward), or it ended: what it allocates
        meanwhile is inside a GPU's kernel, never in its allocator."""
        self._attention = running

    def made_on_device(self, t: torch.Tensor, category: str) -> None:
        """`t` was made inside the kernel, and a GPU's kernel makes it too: its output, the inputs' gradients."""
        record = self.records.get(_key(t)[0])
        if record is not None:
            record["device"], record["category"] = True, category

    def kernel_keeps(self, out: torch.Tensor, inputs: list) -> dict | None:
        """What a GPU's attention kernel saves for backward: its inputs and output (the caller holds them, as
        autograd holds them there) and a float32 log-sum-exp per query row, whose record is returned (to be
        released when the kernel's backward has run)."""
        if self._mode is None:
            return None
        self.made_on_device(out, "activations")
        for t in inputs:
            self._recategorize(t, "activations")
        return self.kernel_holds(out.numel() // max(out.shape[-1], 1) * 4, depth=5)

    def kernel_holds(self, nbytes: int, depth: int = 4) -> dict | None:
        """A GPU kernel holds `nbytes` of device memory for its backward that the CPU's does not (attention's
        log-sum-exp, a recurrent layer's reserve in 16 bits): its record, to be `released` when that backward
        has run; None while no step is tracked."""
        if self._mode is None:
            return None
        record = {"bytes": rounded(nbytes), "category": "activations", "device": True, "site": user_site(depth),
                  "key": None}
        self.timeline.append((1, record))
        return record

    def holds(self, t: torch.Tensor) -> bool:
        """Whether `t`'s storage is device memory in the tracked step (any tensor object on it)."""
        return self._mode is not None and self._on_device(t)

    def on_host(self, t: torch.Tensor) -> None:
        """`t` is the host's, though an op on a device tensor wrote it (a buffer an offloading hook copied a
        saved tensor into): not device memory."""
        record = self.records.get(_key(t)[0])
        if record is not None:
            record["device"] = False

    def released(self, record: dict) -> None:
        if self._mode is not None:
            self.timeline.append((-1, record))

    # -- records ----------------------------------------------------------------------------------
    def _on_device(self, t) -> bool:
        if self.placement.on_device.has(t):
            return True
        key, _ = _key(t)
        record = self.records.get(key)
        return (record is not None and (record["device"] or record["in_kernel"])) or key in self._baseline_keys

    def _allocated(self, t: torch.Tensor, category: str) -> None:
        key, storage = _key(t)
        if key is None or key in self.records or key in self._baseline_keys or not storage.nbytes():
            return
        # the math path's scaled copies, Sq x Sk weights, mask and their gradients: inside a GPU's attention
        # kernel, never in its allocator (its output and the inputs' gradients are made the device's again)
        device = not self._attention
        record = {"bytes": rounded(storage.nbytes()), "category": category, "device": device,
                  "site": user_site(3), "key": key, "in_kernel": not device}
        self.records[key] = record
        self.timeline.append((1, record))
        record["ref"] = weakref.ref(storage, self._gone(record))

    def _packed(self, t):
        if self._on_device(t):
            key, _ = _key(t)
            record = self.records.get(key)
            if record is not None and record["category"] == "temporaries":
                record["category"] = "activations"
        return t

    def _count_baseline(self) -> None:
        """What is on the device as the step begins, each storage once, by what it is; each is followed
        to its end like the step's own (zero_grad frees gradients, backward frees activations)."""
        kinds: dict = {}
        for opt in self.optimizers():
            for group in opt.param_groups:
                for p in group["params"]:
                    kinds.setdefault(_key(p)[0], "parameters")
                    if p.grad is not None:
                        kinds.setdefault(_key(p.grad)[0], "gradients")
            for state in opt.state.values():
                for v in state.values() if isinstance(state, dict) else ():
                    if isinstance(v, torch.Tensor):
                        kinds.setdefault(_key(v)[0], "optimizer state")
        self._baseline_keys, self.baseline_records = set(), []
        for ref, _ in list(self.placement.on_device._refs.values()):
            t = ref()
            if t is None:
                continue
            key, storage = _key(t)
            if key is None or key in self._baseline_keys or not storage.nbytes():
                continue
            self._baseline_keys.add(key)
            kind = kinds.get(key) or ("parameters" if isinstance(t, torch.nn.Parameter)
                                      else "activations" if t.grad_fn is not None else "other")
            record = {"bytes": rounded(storage.nbytes()), "category": kind, "device": True, "site": None, "key": key,
                      "in_kernel": False}
            self.records[key] = record
            self.baseline_records.append(record)
            record["ref"] = weakref.ref(storage, self._gone(record))

    def _gone(self, record: dict):
        def gone(_ref):  # freed: its address may be reused by the next allocation, which is another block
            self.timeline.append((-1, record))
            if self.records.get(record["key"]) is record:
                del self.records[record["key"]]
                self._baseline_keys.discard(record["key"])
        return gone

    def _final_categories(self) -> None:
        """What step allocations turned out to be once the step ended: a parameter's gradient, optimizer
        state (created at the first step), or still what they were noted as."""
        for opt in self.optimizers():
            for group in opt.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        self._recategorize(p.grad, "gradients")
            for state in opt.state.values():
                for v in state.values() if isinstance(state, dict) else ():
                    if isinstance(v, torch.Tensor):
                        self._recategorize(v, "optimizer state")

    def _recategorize(self, t, category: str) -> None:
        record = self.records.get(_key(t)[0])
        if record is not None:
            record["category"] = category

    def step_peak(self) -> int | None:
        """The tracked steps' peak of allocated bytes (the script asks for it with
        `torch.cuda.max_memory_allocated()`): the caching allocator's replay once the report made it, before
        that a quick pass over their timeline; None until the tracked steps ended."""
        if self.result is not None:
            return self.result["peak_allocated_bytes"]
        if self._ended is None:
            return None
        if self._quick_peak is None:
            now = peak = sum(r["bytes"] for r in self.baseline_records)
            for sign, record in self._ended:
                if record["device"]:
                    now += sign * record["bytes"]
                    peak = max(peak, now)
            self._quick_peak = peak
        return self._quick_peak

    def _replay(self) -> dict:
        base = sum(r["bytes"] for r in self.baseline_records)
        now, peak, peak_at = base, base, -1
        timeline = self._ended or []
        for i, (sign, record) in enumerate(timeline):
            if record["device"]:
                now += sign * record["bytes"]
                if now >= peak:  # the last time it is reached: that iteration's gradients are still known
                    peak, peak_at = now, i
        live = {id(r): r for r in self.baseline_records}
        for sign, record in timeline[:peak_at + 1]:
            if sign > 0:
                live[id(record)] = record
            else:
                live.pop(id(record), None)
        live_records = [r for r in live.values() if r["device"]]
        by_category: dict = {}
        sites: dict = {}
        for r in live_records:
            by_category[r["category"]] = by_category.get(r["category"], 0) + r["bytes"]
            site = r["site"]
            if site:
                where = (site["path"], site["line"])
                entry = sites.setdefault(where, {"path": site["path"], "line": site["line"], "bytes": 0,
                                                 "categories": {}})
                entry["bytes"] += r["bytes"]
                entry["categories"][r["category"]] = entry["categories"].get(r["category"], 0) + r["bytes"]
        allocator, released = self._allocator()  # torch's counts: whole blocks (a large one may keep 1 MiB unsplit)
        top = sorted(sites.values(), key=lambda s: -s["bytes"])[:10]
        peak = max(peak, allocator.peak_allocated)
        return {"peak_allocated_bytes": peak, "peak_reserved_bytes": max(allocator.peak_reserved, peak),
                "start_bytes": base,
                "by_category": {k: v for k, v in sorted(by_category.items(), key=lambda kv: -kv[1]) if v},
                "top_sites": top, "allocations": sum(1 for s, _ in timeline if s > 0),
                "cublas_workspaces": len(self.cublas_passes), "cudnn": sorted(self.cudnn),
                **({"empty_cache": {"calls": len(released), "segments": sum(n for n, _ in released),
                                    "bytes": sum(b for _, b in released)}} if released else {})}

    def cache_emptied(self) -> None:
        """torch.cuda.empty_cache() in a tracked step: the replay gives the free segments back here."""
        if self._mode is not None:
            self.timeline.append((0, EMPTIED))

    def _allocator(self) -> tuple[CachingAllocator, list[tuple[int, int]]]:
        """The caching allocator after the baseline (allocated in the order the device got it) and the step's
        allocations and frees, replayed (caching_allocator.py): its peaks are torch's counters'; and what each
        empty_cache() in the steps gave back (segments, bytes)."""
        allocator, blocks, released = CachingAllocator(), {}, []
        for record in self.baseline_records:
            blocks[id(record)] = allocator.malloc(record["bytes"])
        for sign, record in self._ended or []:
            if record is EMPTIED:
                released.append(allocator.empty_cache())
                continue
            if not record["device"]:
                continue
            if sign > 0:
                blocks[id(record)] = allocator.malloc(record["bytes"])
            elif id(record) in blocks:
                allocator.free(blocks.pop(id(record)))
        return allocator, released

    def snapshot(self) -> dict | None:
        """The step replayed, once: asked for after the profiler stopped, so its calls are not recorded."""
        if self.result is None and self._ended is not None:
            try:
                self.result = self._replay()
            except Exception as exc:  # noqa: BLE001
                record_internal_error("device memory", exc)
            self._ended = None
        return self.result
