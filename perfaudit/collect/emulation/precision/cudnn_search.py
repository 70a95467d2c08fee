"""torch.backends.cudnn.benchmark on the emulated device. With it on, a GPU's cuDNN times its algorithms for each
convolution the first time it meets its shapes (and type, layout, stride, padding, ...), forward and then each
gradient's in backward, and keeps the fastest; a later call with those shapes reuses it. A search costs tens of
milliseconds of host time where the convolution itself takes microseconds (perfaudit's H100 trace of
sample_scripts/cudnn_varying_bad.py), so a script whose shapes keep changing pays it again and again (CUDNN002,
SHAPE001). A CPU has no such cache: the emulated device keeps one, as cuDNN's is keyed, and marks each search in
the trace (probe_schema.CUDNN_SEARCH_MARK) with what the projection times it by (projection/host/cudnn_search.py)."""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ....probe_schema import cudnn_search_mark
from ...internal import record_internal_error
from ..marks import mark
from .convolutions import CONVOLUTIONS, conv_options, per_dim
from .half_math import cpu_autocast_type

_PRECISION = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


class BenchmarkCache:
    """The emulated device's cuDNN benchmark cache: the convolution keys searched so far, in this process."""

    def __init__(self, mode):
        self.mode = mode
        self.seen: set = set()

    def handler(self, func, handler):
        """`handler` (the matrix functions' handler of the moment, autocast.py) for a convolution, a search
        marked first where cuDNN would make one."""
        transposed = CONVOLUTIONS[func][1]

        def handle(f, args, kwargs):
            if args and torch.backends.cudnn.benchmark:
                try:
                    self._convolution(f, args, kwargs, transposed)
                except Exception as exc:  # noqa: BLE001 - a record must never break the script
                    record_internal_error("CUDA emulation", exc)
            return handler(f, args, kwargs)
        return handle

    def _convolution(self, func, args: tuple, kwargs: dict, transposed: bool) -> None:
        x = args[0]
        w = args[1] if len(args) > 1 else kwargs.get("weight")
        if not (isinstance(x, Tensor) and isinstance(w, Tensor)) or not torch.backends.cudnn.enabled \
                or not self.mode.on_device.has(x):
            return
        dtype = cpu_autocast_type() or x.dtype
        precision = _PRECISION.get(dtype)
        if precision is None:  # float64: cuDNN's too, but no tensor cores to choose among; nothing modelled
            return
        bias = args[2] if len(args) > 2 else kwargs.get("bias")
        # the key as cuDNN's cache has it; every call is looked up, so a few calls (the profiler records each)
        key = (func, x.shape, x.is_contiguous(), w.shape, dtype, bias is None, args[3:], _frozen(kwargs) if kwargs else ())
        try:
            if key in self.seen:
                return
        except TypeError:  # a list among the arguments (stride=[2, 2])
            key = (*key[:6], _frozen(args[3:]), key[7])
            if key in self.seen:
                return
        self.seen.add(key)
        grads = (x.requires_grad + w.requires_grad) if torch.is_grad_enabled() else 0
        if precision == "fp32" and torch.backends.cudnn.allow_tf32:
            precision = "tf32"
        flops, nbytes = conv_work(tuple(x.shape), tuple(w.shape), conv_options(args[2:], kwargs, transposed), transposed,
                                  x.element_size())
        mark(cudnn_search_mark(int(grads), flops, nbytes, precision))


def _frozen(value):
    """A hashable stand-in for a call's arguments: lists as tuples, a tensor (a bias) as one."""
    if isinstance(value, Tensor):
        return "tensor"
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def conv_work(x: tuple, w: tuple, options: dict, transposed: bool, itemsize: int) -> tuple[int, int]:
    """A convolution's FLOPs (2 a multiply-add) and the bytes of its input, weight and output, from its shapes:
    `x` (N, C, *spatial) or unbatched (C, *spatial), `w` (out, in / groups, *kernel), a transposed one's
    (in, out / groups, *kernel)."""
    dims = len(w) - 2
    spatial = list(x[-dims:]) if dims > 0 else []
    batch = math.prod(x[:-dims - 1]) if len(x) > dims + 1 else 1
    kernel = list(w[2:])
    stride, dilation = per_dim(options.get("stride"), dims, 1), per_dim(options.get("dilation"), dims, 1)
    groups = int(options.get("groups") or 1)
    padding = options.get("padding", 0)
    if transposed:
        extra = per_dim(options.get("output_padding"), dims, 0)
        pad = per_dim(padding, dims, 0)
        out = [(s - 1) * st - 2 * p + d * (k - 1) + e + 1
               for s, st, p, d, k, e in zip(spatial, stride, pad, dilation, kernel, extra)]
        channels_out = w[1] * groups
        flops = 2 * batch * w[0] * math.prod(spatial) * w[1] * math.prod(kernel)
    else:
        if padding == "same":
            out = list(spatial)
        else:
            pad = [0] * dims if padding == "valid" else per_dim(padding, dims, 0)
            out = [max((s + 2 * p - d * (k - 1) - 1) // st + 1, 0)
                   for s, p, d, k, st in zip(spatial, pad, dilation, kernel, stride)]
        channels_out = w[0]
        flops = 2 * batch * w[0] * math.prod(out) * w[1] * math.prod(kernel)
    outputs = batch * channels_out * math.prod(out)
    return int(flops), int(itemsize * (math.prod(x) + math.prod(w) + outputs))
