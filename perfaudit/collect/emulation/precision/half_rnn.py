"""Recurrent layers (nn.LSTM, nn.GRU, nn.RNN) of a model made 16-bit, or in a CUDA autocast region, on a CPU whose
16-bit products are slow (half_math.slow_half).

A GPU runs them in cuDNN in the 16-bit type; the CPU's own 16-bit kernels made a `.half()` 2-layer LSTM language
model's step 30x its CPU branch's. The layer reaches the device's mode as one call (`_VF.lstm`, its hidden state
and weights in lists): here it is computed in float32 once, its graph kept for backward (a recurrence computed
twice would double the layer's time), its outputs and gradients in the 16-bit type. What the float32 graph saves
is the CPU's, not the device's; the device holds, until backward, what the layer saves in 16 bits (a cuDNN
layer's reserve is of that order), counted from what that graph saved: an estimate, said as such in the
docs (docs/performance.md)."""
from __future__ import annotations

import torch
from torch import Tensor
from torch.profiler import record_function

from ....probe_schema import ASIDE_RANGE as ASIDE
from ....probe_schema import HALF_MATH_RANGE as RANGE
from .half_math import HALF_TYPES, _cpu_autocast_off, _inside_kernel, cpu_autocast_type, slow_half

RNN_FUNCTIONS = tuple(getattr(torch._VF, name) for name in ("lstm", "gru", "rnn_tanh", "rnn_relu")
                      if hasattr(torch._VF, name))


def _flatten(args: tuple) -> tuple[list, list]:
    """The call's arguments as a flat list (the tensors of its lists in place) and how to rebuild them."""
    flat: list = []
    layout: list = []
    for a in args:
        if isinstance(a, (list, tuple)) and a and all(isinstance(t, Tensor) for t in a):
            layout.append((type(a), len(a)))
            flat.extend(a)
        else:
            layout.append(None)
            flat.append(a)
    return flat, layout


def _rebuild(flat: list, layout: list) -> list:
    args, at = [], 0
    for shape in layout:
        if shape is None:
            args.append(flat[at])
            at += 1
        else:
            kind, n = shape
            args.append(kind(flat[at:at + n]))
            at += n
    return args


class _Saved:
    """A saved-tensors hook counting what the float32 graph saves beside its inputs, in 16 bits: half its bytes
    (the CPU's own workspace, a byte buffer, holds float32 gate values too)."""

    def __init__(self, inputs: list):
        self.inputs = {id(t) for t in inputs if isinstance(t, Tensor)}
        self.storages: set = set()
        self.bytes = 0

    def pack(self, t: Tensor) -> Tensor:
        if id(t) not in self.inputs:
            key = t.untyped_storage().data_ptr()
            if key not in self.storages:
                self.storages.add(key)
                self.bytes += t.untyped_storage().nbytes() // 2
        return t


class KeptInFloat32(torch.autograd.Function):
    """`func(*rebuilt)` on 16-bit inputs, computed in float32 once under a graph of its own kept for backward (what
    it draws, a dropout mask, drawn once); its outputs (a tensor or a tuple) and the inputs' gradients in `dtype`.
    With `reserve`, the device holds until backward what that graph saved, in 16 bits (a recurrent layer's);
    without, the caller says what the GPU's kernel holds (attention.py)."""

    @staticmethod
    def forward(ctx, func, layout, dtype, placement, reserve, *half):
        ctx.set_materialize_grads(False)
        needs = ctx.needs_input_grad[5:]
        with _inside_kernel(placement, []) as made:
            with record_function(ASIDE):  # the float32 copies: no GPU makes them (projection/timeline.py)
                wide = [t.detach().float().requires_grad_(bool(need)) if isinstance(t, Tensor)
                        and t.is_floating_point() else t for t, need in zip(half, needs)]
            saved = _Saved(wide)
            with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
                outs = func(*_rebuild(wide, layout))
            single = isinstance(outs, Tensor)
            outs = (outs,) if single else tuple(outs)
            with record_function(ASIDE):
                result = tuple(o.detach().to(dtype) for o in outs)
            made.extend(result)
        ctx.dtype, ctx.placement, ctx.graph = dtype, placement, (wide, outs)
        memory = placement.memory
        ctx.record = memory.kernel_holds(saved.bytes) if reserve and memory is not None and any(needs) else None
        return result[0] if single else result

    @staticmethod
    def backward(ctx, *grads):
        wide, outs = ctx.graph
        wanted = [i for i, t in enumerate(wide) if isinstance(t, Tensor) and t.requires_grad]
        result: list = [None] * len(wide)
        with record_function(f"{RANGE}({ctx.dtype})"), _cpu_autocast_off(), \
                _inside_kernel(ctx.placement, []) as made:
            with record_function(ASIDE):
                pairs = [(o, g.float()) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
            if pairs and wanted:
                got = torch.autograd.grad([o for o, _ in pairs], [wide[i] for i in wanted], [g for _, g in pairs],
                                          retain_graph=True, allow_unused=True)  # a second backward, as on a GPU
                with record_function(ASIDE):  # the gradients as the GPU's 16-bit kernel makes them
                    for i, g in zip(wanted, got):
                        result[i] = g.to(ctx.dtype) if g is not None else None
            made.extend(r for r in result if r is not None)
        memory = ctx.placement.memory
        if memory is not None and ctx.record is not None:
            memory.released(ctx.record)
            ctx.record = None
        return (None, None, None, None, None, *result)


def kept_in_float32(func, args: list, dtype: torch.dtype, placement, reserve: bool):
    """`func(*args)` (its tensors' lists flattened) as a GPU runs it in `dtype`: floating inputs cast to it under
    autograd (autocast's casts; none for a model already in it), KeptInFloat32."""
    flat, layout = _flatten(tuple(args))
    with record_function(f"{RANGE}({dtype})"), _cpu_autocast_off():
        half = [t.to(dtype) if isinstance(t, Tensor) and t.is_floating_point() else t for t in flat]
        return KeptInFloat32.apply(func, layout, dtype, placement, reserve, *half)


def half_rnn_handler(mode):
    """The mode's handler for RNN_FUNCTIONS: on device tensors in a 16-bit type (the model's, or an enabled
    autocast region's) this CPU is slow at, KeptInFloat32; every other call takes the mode's own path."""
    def handle(func, args, kwargs):
        first = args[0] if args else None
        if kwargs or not isinstance(first, Tensor) or not first.is_floating_point():
            return mode.DEFAULT
        tensors = [t for t in _flatten(args)[0] if isinstance(t, Tensor)]
        region = cpu_autocast_type()
        dtype = region or first.dtype
        floats = [t for t in tensors if t.is_floating_point()]
        if dtype not in HALF_TYPES or not any(mode.on_device.has(t) for t in tensors) or any(
                t.dtype == torch.float64 or (region is None and t.dtype != dtype) for t in floats) \
                or not slow_half(dtype):
            return mode.DEFAULT  # float32 math, host tensors, types the call itself refuses
        outs = kept_in_float32(func, list(args), dtype, mode, reserve=True)
        mode.device_ops += 1
        for t in outs:
            mode.on_device.add(t)
        return outs
    return handle
