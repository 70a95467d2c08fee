"""torch.use_deterministic_algorithms(True) on the emulated device. cuBLAS's products are deterministic only
with CUBLAS_WORKSPACE_CONFIG set to ":4096:8" or ":16:8" (read once, at the first product): without it a GPU's
first matrix product raises, or warns under `warn_only=True` (ATen's alertCuBLASConfigNotDeterministic), a
classic failure of scripts that seed everything for reproducibility. A CPU's products raise nothing, so the
emulated device checks its own: while deterministic algorithms are on and the variable was not set when the
first product ran, a matrix product on the device raises (or warns) torch's words, at the script's line."""
from __future__ import annotations

import os
import warnings

import torch
from torch import Tensor

from ...wrap import patch
from ..cuda_shim import gpu_error
from .half_math import MATRIX_FUNCTIONS

# the products cuBLAS computes on a GPU: the matrix functions but the convolutions (cuDNN's)
CUBLAS_FUNCTIONS = frozenset(f for f in MATRIX_FUNCTIONS if not getattr(f, "__name__", "").startswith("conv"))
DETERMINISTIC_CONFIGS = (":4096:8", ":16:8")
MESSAGE = ("Deterministic behavior was enabled with either `torch.use_deterministic_algorithms(True)` or "
           "`at::Context::setDeterministicAlgorithms(true)`, but this operation is not deterministic because it uses "
           "CuBLAS and you have CUDA >= 10.2. To enable deterministic behavior in this case, you must set an "
           "environment variable before running your PyTorch application: CUBLAS_WORKSPACE_CONFIG=:4096:8 or "
           "CUBLAS_WORKSPACE_CONFIG=:16:8. For more information, go to "
           "https://docs.nvidia.com/cuda/cublas/index.html#results-reproducibility")


def follow_determinism(mode, handlers_changed) -> None:
    """`mode.cublas_check` follows torch.use_deterministic_algorithms; `handlers_changed()` puts the guard
    on the matrix functions' handlers (autocast.py) or takes it off."""
    original = torch.use_deterministic_algorithms
    configured: list = []   # the variable's verdict, read at the first product on the device (ATen's static)

    def use_deterministic_algorithms(*args, **kwargs):
        out = original(*args, **kwargs)
        on = torch.are_deterministic_algorithms_enabled() and not (configured and configured[0])
        if on != mode.cublas_check:
            mode.cublas_check = on
            handlers_changed()
        return out

    def refuse(args) -> None:
        if not torch.are_deterministic_algorithms_enabled() or not any(
                type(a) is Tensor and mode.on_device.has(a) for a in args):
            return
        if not configured:
            configured.append(os.environ.get("CUBLAS_WORKSPACE_CONFIG") in DETERMINISTIC_CONFIGS)
        if configured[0]:
            mode.cublas_check = False
            handlers_changed()
        elif torch.is_deterministic_algorithms_warn_only_enabled():
            warnings.warn(MESSAGE, UserWarning, stacklevel=4)
        else:
            raise gpu_error(MESSAGE)

    mode.cublas_check = False
    mode.refuse_nondeterministic = refuse
    patch(torch, "use_deterministic_algorithms", use_deterministic_algorithms)


def guarded(mode, handler):
    """`handler` for a cuBLAS function, after the determinism check."""
    def handle(func, args, kwargs):
        mode.refuse_nondeterministic(args)
        return handler(func, args, kwargs)
    return handle
