"""CUDA autocast on the emulated device. The device's tensors are CPU tensors, which a CUDA autocast region leaves
alone: without help its matrix math ran in float32 (twice a GPU's activation memory, projected as float32 math).
Each CUDA region therefore runs a CPU autocast region inside it, with the region's dtype (float16 too: a script's
`dtype == torch.float16` branch runs, and float16 overflows as on a GPU); and where the two policies differ, the
device's ops follow CUDA's: the ops CUDA's autocast runs in float32 (softmax, layer_norm, exp, sum, …: torch's
"CUDA Ops that can autocast to float32") get their 16-bit inputs cast to float32, as a GPU does, while an enabled
CUDA region is innermost. On a CPU whose 16-bit matrix products (or convolutions alone) are slow, the region's
matrix ops (or convolutions) compute in float32 and keep their 16-bit types (half_math.py), as do a 16-bit
model's outside any region, and recurrent layers (half_rnn.py)."""
from __future__ import annotations

import torch
from torch import Tensor

from ...internal import record_internal_error
from ...wrap import patch
from ..cuda_shim import gpu_error
from .convolutions import CONVOLUTIONS
from .cudnn_search import BenchmarkCache
from .determinism import CUBLAS_FUNCTIONS, follow_determinism, guarded
from .half_math import HALF_TYPES as _HALF
from .half_math import MATRIX_FUNCTIONS, half_math_handler, half_model_handler, slow_half
from .half_rnn import RNN_FUNCTIONS, half_rnn_handler

_SHADOWS = "_perfaudit_cpu_autocast"
# CUDA's float32 list (torch.amp docs, "CUDA Ops that can autocast to float32") where the CPU's differs
_FLOAT32_NAMES = ("pow", "__pow__", "__rpow__", "__rtruediv__", "acos", "asin", "cosh", "sinh", "tan", "erfinv",
                  "exp", "expm1", "log", "log10", "log1p", "log2", "reciprocal", "rsqrt", "sum", "prod", "cumsum",
                  "cumprod", "renorm", "norm", "dist", "cdist", "pdist", "softmax", "log_softmax", "softmin",
                  "softplus", "layer_norm", "group_norm", "normalize", "cosine_similarity")


def float32_functions() -> list:
    """The torch, Tensor and functional forms of CUDA's float32 ops, as a TorchFunctionMode sees them."""
    found = []
    for name in _FLOAT32_NAMES:
        for owner in (torch, Tensor, torch.nn.functional):
            func = getattr(owner, name, None)
            if callable(func) and func not in found:
                found.append(func)
    return found


# CUDA autocast refuses this op on the device's tensors (aten's binary_cross_entropy_banned); the CPU's allows it
BANNED = (torch.nn.functional.binary_cross_entropy,)
BANNED_MESSAGE = ("torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
                  "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
                  "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
                  "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
                  "safe to autocast.")


def follow_autocast(mode) -> None:
    region_class = torch.amp.autocast_mode.autocast
    enter, leave = region_class.__enter__, region_class.__exit__
    handler = _float32_handler(mode)
    # CUDA's own policy where the CPU's differs, while an enabled CUDA region is innermost
    policy = [*((func, handler) for func in float32_functions()),
              *((func, _banned_handler(mode)) for func in BANNED)]
    enabled: list = []   # the CUDA regions entered and not left, innermost last: the CPU's dtype, None if off
    half_handlers: dict = {}
    half_model = half_model_handler(mode)  # where no slow enabled region decides: a model made 16-bit
    searches = BenchmarkCache(mode)  # cudnn.benchmark's searches, marked before the convolutions

    def follow() -> None:  # CUDA's float32 policy while an enabled CUDA region is innermost
        dtype = enabled[-1] if enabled else None
        for func, follows in policy:
            if dtype is not None:
                mode.handlers[func] = follows
            else:
                mode.handlers.pop(func, None)
        for func in MATRIX_FUNCTIONS:  # a product refused first where determinism needs cuBLAS's config
            half = half_model
            if dtype is not None and slow_half(dtype, func):  # a convolution's 16-bit kernels may be slow alone
                if dtype not in half_handlers:
                    half_handlers[dtype] = half_math_handler(mode, dtype)
                half = half_handlers[dtype]
            handler = guarded(mode, half) if mode.cublas_check and func in CUBLAS_FUNCTIONS else half
            mode.handlers[func] = searches.handler(func, handler) if func in CONVOLUTIONS else handler

    def __enter__(region):
        entered = enter(region)
        try:
            on = bool(getattr(region, "_enabled", True))
            mode.autocast_entered(region.device, getattr(region, "fast_dtype", None), on)
            if region.device == "cuda":
                dtype = getattr(region, "fast_dtype", None)
                cpu_dtype = dtype or torch.float16  # CUDA autocast's default type
                shadow = torch.autocast("cpu", dtype=cpu_dtype, enabled=on,
                                        cache_enabled=getattr(region, "_cache_enabled", None))
                enter(shadow)  # torch's own: the shadow is not the script's region, and is not noted
                region.__dict__.setdefault(_SHADOWS, []).append(shadow)  # a region re-entered (a decorator) stacks
                enabled.append(cpu_dtype if on and cpu_dtype in _HALF else None)
                follow()
        except Exception as exc:  # noqa: BLE001 - never break the user's script
            record_internal_error("CUDA emulation", exc)
        return entered

    def __exit__(region, *exc_info):
        shadows = region.__dict__.get(_SHADOWS)
        if shadows:
            try:
                leave(shadows.pop(), *exc_info)
                if enabled:
                    enabled.pop()
                if not enabled:  # the outermost region ended: autocast's casts go
                    for half in half_handlers.values():
                        half.cache.clear()
                follow()
            except Exception as exc:  # noqa: BLE001
                record_internal_error("CUDA emulation", exc)
        return leave(region, *exc_info)

    patch(region_class, "__enter__", __enter__)
    patch(region_class, "__exit__", __exit__)
    follow_determinism(mode, follow)
    follow()  # outside any region: the handler of a model made 16-bit
    mode.handlers.update(dict.fromkeys(RNN_FUNCTIONS, half_rnn_handler(mode)))  # its type read as each call runs


def _float32_handler(mode):
    def handle(func, args, kwargs):
        on_device = mode.on_device
        if not any(type(a) is Tensor and on_device.has(a) for a in args):  # CUDA's autocast: device tensors only
            return mode.DEFAULT
        out = func(*(a.float() if type(a) is Tensor and a.dtype in _HALF else a for a in args), **kwargs)
        if isinstance(out, Tensor):
            mode.device_ops += 1
            on_device.add(out)
        return out
    return handle


def _banned_handler(mode):
    def handle(func, args, kwargs):
        if any(type(a) is Tensor and mode.on_device.has(a) for a in (*args, *kwargs.values())):
            raise gpu_error(BANNED_MESSAGE)  # as a GPU raises it, at the script's line
        return mode.DEFAULT
    return handle
