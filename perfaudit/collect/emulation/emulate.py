"""`--device emulate-cuda`: the script's CUDA branch, run on the CPU and recorded.

Composes the CUDA API shim (cuda_shim.py) and the placement mode (placement.py) with the probes:
DataLoader batches are tagged as the loader's, pinned memory is pinned, autocast and GradScaler are
noted, and a job's NCCL process group runs on gloo. The mode is pushed on the main thread before the
script starts and never popped: the process ends with the script.
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading

import torch

from ..internal import record_internal_error
from ..wrap import on_undo, patch
from . import cuda_shim
from .checkpointing import checkpoint_compares_without_the_device, recompute_under_the_mode
from .grouping import group_on_the_emulated_device
from .memory.device_memory import DeviceMemory
from .memory.pools import serve_mem_pools
from .moves.checkpoints import load_onto_the_device
from .opaque.compiled import compiled_code_without_the_mode, on_top
from .opaque.graphs import serve_graphs
from .opaque.scripted import scripted_code_follows
from .placement import Placement
from .precision.autocast import follow_autocast
from .transforms import follow_func_transforms


def wanted(config: dict) -> bool:
    """Whether this run emulates CUDA: asked for, and no GPU here (on a GPU nothing is emulated)."""
    return config.get("device") == "emulate-cuda" and not cuda_shim.gpu_present()


def install(probes, steps_ended, gpu: dict | None = None) -> Placement:
    """Emulate one CUDA device for the script, the GPU `gpu` describes (the run's target: cuda_shim.install);
    `steps_ended()` counts the steps so far (a tensor made in the step that moves it is the COPY002 pattern;
    one kept from an earlier step is data)."""
    mode = Placement()
    mode.window_step = probes.window_step
    mode.step_clock = steps_ended
    cuda_shim.install(mode, gpu)
    serve_graphs()
    serve_mem_pools()
    _pinning(mode)
    load_onto_the_device(mode)
    follow_autocast(mode)
    compiled_code_without_the_mode(mode)
    scripted_code_follows(mode)
    follow_func_transforms(mode)
    group_on_the_emulated_device(mode)
    checkpoint_compares_without_the_device()
    recompute_under_the_mode(mode)
    _host_fetches_without_the_mode(mode)
    _cpu_branch_without_the_mode(mode)
    _threads_follow(mode)
    _data_parallel(mode)
    _parameters_follow_their_data(mode)
    _offloading(mode)
    _distributed()
    _legacy_default_type(mode)
    probes.add("cuda_emulation", mode)
    probes.placement = mode
    probes.device_memory = DeviceMemory(mode, lambda: [info["_ref"] for info in probes.optimizers.values()])
    probes.add("device_memory", probes.device_memory)
    mode.tracked_memory = probes.device_memory  # the script's memory queries read its tracked steps' peak
    mode.__enter__()
    os.register_at_fork(after_in_child=lambda: _leave(mode))
    cuda_shim.AS_ON_A_GPU.add(BAD_FORK)  # raised in the child, read in this process from the worker's error
    return mode


# torch's words when a forked process uses CUDA that its parent initialised (torch.cuda._lazy_init)
BAD_FORK = ("Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the "
            "'spawn' start method")


def _leave(mode: Placement) -> None:
    """A forked child (a DataLoader worker) prepares batches on the host: it runs without the mode,
    whose records would stay in the child and whose cost would compete with the step for the CPUs. Once the
    script put something on the device, the child is what a GPU's is, a bad fork: CUDA there raises torch's
    "Cannot re-initialize CUDA in forked subprocess" (a Dataset that moves its samples with `.cuda()`)."""
    try:
        if on_top(mode):
            torch._C._pop_torch_function_stack()
        if mode.placements or mode.on_device:
            _bad_fork()
    except Exception as exc:  # noqa: BLE001
        record_internal_error("CUDA emulation", exc)


def _bad_fork() -> None:
    """In this forked child, a tensor moved to CUDA raises as in a GPU's (this CPU build's own error says it has
    no CUDA, and the run was taken for one the emulated device cannot serve)."""
    original_to = torch.Tensor.to

    def cuda(*args, **kwargs):
        raise RuntimeError(BAD_FORK)

    def to(self, *args, **kwargs):
        if _targets_cuda(args, kwargs):
            raise RuntimeError(BAD_FORK)
        return original_to(self, *args, **kwargs)

    torch.Tensor.cuda = cuda  # type: ignore[method-assign]
    torch.Tensor.to = to  # type: ignore[method-assign]


def _pinning(mode: Placement) -> None:
    """pin_memory() pins (a pinning DataLoader's thread calls it too, outside the mode's thread); a tensor
    on the device cannot be pinned, as on a GPU (a Dataset of CUDA tensors under pin_memory=True)."""
    def pin_memory(self, device=None):
        if mode.on_device.has(self):
            name = next((n for n, d in cuda_shim.LEGACY_TYPES.items() if d == self.dtype), "Tensor")
            raise cuda_shim.gpu_error(f"cannot pin 'torch.cuda.{name}' only dense CPU tensors can be pinned")
        mode.pinned.add(self)
        return self

    setattr(torch.Tensor, "pin_memory", pin_memory)  # noqa: B010 (a torch method replaced: mypy forbids assigning it)
    setattr(torch.Tensor, "is_pinned", lambda self, device=None: mode.pinned.has(self))  # noqa: B010


def _offloading(mode: Placement) -> None:
    """`save_on_cpu` (activation offloading) packs each saved tensor in a hook no torch function mode reaches,
    where a device tensor is a CPU tensor already: `.cpu()` would keep it (the device's memory never freed) and
    `pin_memory=True` finds no pinnable memory here (the run fell back to the CPU path). On the emulated device
    each saved tensor is copied into a host buffer (noted pinned when asked), as torch's pinned path does, and
    one that was the device's comes back as the device's in backward."""
    cls = getattr(torch.autograd.graph, "save_on_cpu", None)
    if cls is None:
        return
    hooks_init = torch.autograd.graph.saved_tensors_hooks.__init__

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        def pack(tensor):
            if tensor.is_sparse:
                return (False, tensor)
            # a saved output reaches the hook as another tensor object on the same storage: the tracked step's
            # memory knows it by its storage
            on_device = mode.on_device.has(tensor) or (mode.memory is not None and mode.memory.holds(tensor))
            packed = torch.empty(tensor.size(), dtype=tensor.dtype, layout=tensor.layout, device="cpu")
            packed.copy_(tensor)
            if pin_memory:
                mode.pinned.add(packed)
            if mode.memory is not None:  # a step's memory is tracked: the buffer is the host's
                mode.memory.on_host(packed)
            return (on_device, packed)

        def unpack(packed):
            offloaded, tensor = packed
            if offloaded:
                tensor = tensor.clone()  # the copy back to the device: a device tensor of its own
                mode.on_device.add(tensor)
                if mode.memory is not None:
                    mode.memory.placed(tensor, "activations")
            return tensor
        hooks_init(self, pack, unpack)

    patch(cls, "__init__", __init__)


def _parameters_follow_their_data(mode: Placement) -> None:
    """`nn.Parameter(t)` (and `nn.Buffer(t)`) is a new tensor sharing t's data, made outside the mode's
    reach (Tensor._make_subclass): on the device when t is, as a GPU has it. A layer built with
    device="cuda" or under torch.set_default_device("cuda"), `nn.Parameter(torch.zeros(..., device=dev))`,
    a meta-device model's `to_empty(device="cuda")`: each left its parameters on the host."""
    for cls in (torch.nn.Parameter, getattr(torch.nn, "Buffer", None)):
        if cls is None or "__new__" not in cls.__dict__:
            continue

        def __new__(kind, data=None, *args, _original=cls.__new__, **kwargs):
            out = _original(kind, data, *args, **kwargs)
            try:
                if data is not None and mode.on_device.has(data):
                    mode.on_device.add(out)
            except Exception as exc:  # noqa: BLE001 - a record must never break the script
                record_internal_error("CUDA emulation", exc)
            return out
        patch(cls, "__new__", staticmethod(__new__))


def _names_cuda(exc: BaseException) -> bool:
    """Whether an exception is torch refusing a CUDA call (this build has no CUDA)."""
    text = f"{type(exc).__name__} {exc}".lower()
    return any(k in text for k in ("cuda", "nvidia", "cudnn", "nccl"))


def _host_fetches_without_the_mode(mode: Placement) -> None:
    """A Dataset's per-sample work (decoding, transforms, collate) in the main process is host work on
    host tensors: once a loader's first fetches showed it never touches the device, its fetches run with
    the mode set aside, at native speed (Placement.fetch_begins). A map-style fetch that reaches for the
    device after all is run again, same indices, under the mode."""
    from torch.utils.data._utils import fetch as fetchers

    def aside(original, retry: bool):
        @functools.wraps(original)
        def fetch(self, index):
            if not mode.fetch_aside or not on_top(mode):
                return original(self, index)
            try:
                with torch.overrides._pop_mode_temporarily(), _memory_aside(mode):
                    return original(self, index)
            except Exception as exc:
                if not _names_cuda(exc):
                    raise
                mode.fetch_touched_device()
                if not retry:
                    raise
            mode.fetch_aside = False
            return original(self, index)
        return fetch

    for cls, retry in ((fetchers._MapDatasetFetcher, True), (fetchers._IterableDatasetFetcher, False)):
        patch(cls, "fetch", aside(cls.fetch, retry))


def _memory_aside(mode: Placement):
    """A host-only fetch while the device's memory is tracked: the tracker's dispatch mode set aside too."""
    if mode.memory is None:
        return contextlib.nullcontext()
    from torch.utils._python_dispatch import _disable_current_modes
    return _disable_current_modes()


def _cpu_branch_without_the_mode(mode: Placement) -> None:
    """A script whose first optimizer step ran with nothing ever put on the device took its CPU branch
    (an opt-in --cuda left off, a config's device): from then on its host work runs without the mode,
    at native speed. Should it still move a tensor to "cuda" later (`.to`, `.cuda()`), the mode comes
    back for that call and stays."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    decided: list = []

    def after_step(opt, args, kwargs):
        if decided:  # once, at the first step (the hook stays: torch iterates its hooks while calling them)
            return
        decided.append(True)
        try:
            if mode.placements or threading.get_ident() != mode._main_thread or not on_top(mode):
                return
            torch._C._pop_torch_function_stack()
            mode.aside = True
            _back_on_a_move_to_cuda(mode)
        except Exception as exc:  # noqa: BLE001
            record_internal_error("CUDA emulation", exc)

    on_undo(register_optimizer_step_post_hook(after_step).remove)


def _back_on_a_move_to_cuda(mode: Placement) -> None:
    def back(name: str):
        original = getattr(torch.Tensor, name)

        def moved(self, *args, **kwargs):
            if mode.aside and (name == "cuda" or _targets_cuda(args, kwargs)):
                mode.aside = False
                torch._C._push_on_torch_function_stack(mode)
            return original(self, *args, **kwargs)
        # the profiler names a frame by its code: the user's line then calls `to`, as the CPU-run copy
        # evidence (facts/gpu/copies.py) reads it, not `moved`
        moved.__code__ = moved.__code__.replace(co_name=name)
        patch(torch.Tensor, name, functools.wraps(original)(moved))

    for name in ("to", "cuda"):
        back(name)


def _targets_cuda(args, kwargs) -> bool:
    target = kwargs.get("device", args[0] if args else None)
    return (isinstance(target, str) and target.startswith("cuda")) or (
        isinstance(target, torch.device) and target.type == "cuda")


def _threads_follow(mode: Placement) -> None:
    """The mode is per thread: a thread the script starts (a prefetcher copying the next batch to the
    device on a side stream, a pool of loaders) sees the device the main thread sees."""
    original = getattr(threading.Thread, "_bootstrap_inner", None)
    if original is None:  # an interpreter without it: threads run without the mode
        return

    def _bootstrap_inner(self):
        try:
            if not mode.aside:
                torch._C._push_on_torch_function_stack(mode)
        except Exception as exc:  # noqa: BLE001
            record_internal_error("CUDA emulation", exc)
        return original(self)

    patch(threading.Thread, "_bootstrap_inner", _bootstrap_inner)


def _data_parallel(mode: Placement) -> None:
    """nn.DataParallel over the one emulated device: torch runs the module itself after scattering the
    inputs to device 0, a copy of every host tensor among them (the scatter's C++ has no CPU path)."""
    from torch.nn.parallel import DataParallel
    from torch.utils._pytree import tree_map

    def scatter(self, inputs, kwargs, device_ids):
        def to_device(t):
            return t.to(self.src_device_obj) if isinstance(t, torch.Tensor) and not mode.on_device.has(t) else t
        if len(device_ids) != 1:
            return original(self, inputs, kwargs, device_ids)
        return (tree_map(to_device, tuple(inputs)),), (tree_map(to_device, dict(kwargs or {})),)

    original = DataParallel.scatter
    patch(DataParallel, "scatter", scatter)


def _legacy_default_type(mode: Placement) -> None:
    """`torch.set_default_tensor_type("torch.cuda.FloatTensor")` (older research code, nerf-pytorch's first line):
    every factory without a device, and the legacy `torch.Tensor(data)`, makes its tensor on CUDA. This CPU build
    refuses a CUDA type; the emulated device makes it torch's default device and the type's dtype the default
    dtype, as torch now recommends, and places what `torch.Tensor(...)` makes meanwhile (a copy, from data)."""
    original, cuda_default = torch.set_default_tensor_type, [False]
    base_new, Tensor = torch.Tensor.__new__, torch.Tensor

    def legacy_new(*args, **kwargs):  # (cls, ...) unnamed: torch._dynamo checks the signature of what it finds here
        out = base_new(*args, **kwargs)
        if args[0] is Tensor and cuda_default[0]:
            data = args[1:]
            mode.place(out, copied_from_host=bool(data) and not all(isinstance(a, int) for a in data))
        return out

    @functools.wraps(original)
    def set_default_tensor_type(t):
        name = t if isinstance(t, str) else getattr(t, "__qualname__", "")
        if not (name.startswith("torch.cuda.") or getattr(t, "is_emulated_cuda_type", False)):
            default = getattr(torch, "get_default_device", None)  # torch 2.3 and newer
            if default is not None and default().type == "cuda":  # back to a CPU type: CPU tensors again
                torch.set_default_device(None)
            cuda_default[0] = False
            return original(t)
        dtype = cuda_shim.LEGACY_TYPES.get(name.rsplit(".", 1)[-1])
        if dtype is None or not dtype.is_floating_point:
            return original(t)  # torch's own refusal: only floating-point types can be the default
        torch.set_default_dtype(dtype)
        torch.set_default_device("cuda")
        if not cuda_default[0] and "__new__" not in Tensor.__dict__:
            setattr(Tensor, "__new__", legacy_new)  # noqa: B010 (the legacy constructor, while the type is CUDA)
        cuda_default[0] = True

    torch.set_default_tensor_type = set_default_tensor_type


NCCL_VERSION = (2, 27, 3)  # the NCCL of torch's cu128 wheels (nvidia-nccl-cu12 2.27.3)


def _distributed() -> None:
    """NCCL is the GPU's collective library: the emulated job runs its collectives on gloo, and DDP
    wraps a module that is really on the CPU (no device_ids). A script that prints its environment asks
    torch.cuda.nccl for NCCL's version, which a CPU build cannot give: that build's (cuda_shim.CUDA_VERSION)."""
    nccl = getattr(torch.cuda, "nccl", None)
    if nccl is not None:
        nccl.version = lambda: NCCL_VERSION
    if not torch.distributed.is_available():
        return
    import torch.distributed as dist
    original_init = dist.init_process_group

    @functools.wraps(original_init)
    def init_process_group(*args, **kwargs):
        backend = kwargs.get("backend", args[0] if args else None)
        if backend is None or "nccl" in str(backend):
            kwargs["backend"] = "gloo"
            args = args[1:] if args else args
        kwargs.pop("device_id", None)
        return original_init(*args, **kwargs)

    dist.init_process_group = init_process_group
    from torch.nn.parallel import DistributedDataParallel as DDP
    original_ddp = DDP.__init__

    @functools.wraps(original_ddp)
    def __init__(self, module, *args, **kwargs):
        kwargs.pop("device_ids", None)
        kwargs.pop("output_device", None)
        args = (None, None, *args[2:]) if args else args  # device_ids, output_device come first
        return original_ddp(self, module, *args, **kwargs)

    setattr(DDP, "__init__", __init__)  # noqa: B010
