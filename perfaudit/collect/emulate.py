"""`--device emulate-cuda`: the script's CUDA branch, run on the CPU and recorded.

Composes the CUDA API shim (cuda_shim.py) and the placement mode (placement.py) with the probes:
DataLoader batches are tagged as the loader's, pinned memory is pinned, autocast and GradScaler are
noted, and a job's NCCL process group runs on gloo. The mode is pushed on the main thread before the
script starts and never popped: the process ends with the script.
"""
from __future__ import annotations

import functools

import torch

from . import cuda_shim
from .internal import record_internal_error
from .placement import ACTIVE, Placement


def wanted(config: dict) -> bool:
    """Whether this run emulates CUDA: asked for, and no GPU here (on a GPU nothing is emulated)."""
    return config.get("device") == "emulate-cuda" and not cuda_shim.gpu_present()


def install(probes, steps_ended) -> Placement:
    """Emulate one CUDA device for the script; `steps_ended()` counts the steps so far (a tensor made
    in the step that moves it is the COPY002 pattern; one kept from an earlier step is data)."""
    mode = Placement()
    mode.window_step = probes.window_step
    mode.step_clock = steps_ended
    ACTIVE["mode"] = mode
    cuda_shim.install(mode)
    _pinning(mode)
    _autocast(mode)
    _distributed()
    probes.add("cuda_emulation", mode)
    probes.placement = mode
    mode.__enter__()
    return mode


def _pinning(mode: Placement) -> None:
    """pin_memory() pins (a pinning DataLoader's thread calls it too, outside the mode's thread)."""
    def pin_memory(self, device=None):
        mode.pinned.add(self)
        return self

    torch.Tensor.pin_memory = pin_memory
    torch.Tensor.is_pinned = lambda self, device=None: mode.pinned.has(self)


def _autocast(mode: Placement) -> None:
    original = torch.amp.autocast_mode.autocast.__enter__

    @functools.wraps(original)
    def __enter__(self):
        try:
            mode.autocast_entered(self.device, getattr(self, "fast_dtype", None), getattr(self, "_enabled", True))
        except Exception as exc:  # noqa: BLE001
            record_internal_error("CUDA emulation", exc)
        return original(self)

    torch.amp.autocast_mode.autocast.__enter__ = __enter__


def _distributed() -> None:
    """NCCL is the GPU's collective library: the emulated job runs its collectives on gloo, and DDP
    wraps a module that is really on the CPU (no device_ids)."""
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

    DDP.__init__ = __init__
