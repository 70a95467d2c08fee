"""Matrix math of a CUDA autocast region on a CPU whose 16-bit kernels are slow.

A CPU without AVX512-BF16/AMX (AVX2: most laptops, older servers) runs a bfloat16 or float16 GEMM through
reference code: 60-400x its float32 time (a 256x512x512 product: 1.1 ms in float32, 100 ms in bfloat16, on an
AVX2 EPYC). The emulated device's autocast would make a script's step that much slower than a GPU's or its own CPU
branch. There, each matrix op of an enabled region takes its inputs in the region's type, as autocast does,
keeps those 16-bit tensors for backward (what a GPU holds), and computes in float32: forward, and in backward
the gradients from their formulas (formula_grads.py: products, convolutions) or else the op again under
autograd. The result is in the 16-bit type. Each call and its backward run inside a
`perfaudit::half(<type>)` range, and what a GPU would not do inside a `perfaudit::aside` one (the float32
copies, the recomputation): the projection counts the matrix ops of the first as 16-bit and leaves the second
out (projection/timeline.py). An op whose computing twice would cost (a recurrent layer, an attention) is
computed once instead, its float32 graph kept for backward (KeptInFloat32, at the end)."""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ....probe_schema import ASIDE_RANGE as ASIDE
from ....probe_schema import HALF_MATH_RANGE as RANGE
from ..marks import span
from .convolutions import CONVOLUTIONS
from .formula_grads import formula_grads

# the matrix ops a script calls from Python (nn.Linear, nn.Conv*, `@`, einsum: its products are bmm's, which
# autocast casts), as a TorchFunctionMode sees them
MATRIX_FUNCTIONS = (F.linear, torch.matmul, Tensor.matmul, Tensor.__matmul__, torch.mm, Tensor.mm, torch.bmm,
                    Tensor.bmm, torch.addmm, torch.baddbmm, F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d,
                    F.conv_transpose2d, F.conv_transpose3d, torch.einsum)
# each one's argument that is only added to the product (a bias): no other gradient needs it
_ADDED = {F.linear: 2, F.conv1d: 2, F.conv2d: 2, F.conv3d: 2, F.conv_transpose1d: 2, F.conv_transpose2d: 2,
          F.conv_transpose3d: 2, torch.addmm: 0, torch.baddbmm: 0}
SLOW_RATIO = 4.0  # 16-bit products this many times slower than float32 ones: compute them in float32
_slow: dict = {}


def slow_half(dtype: torch.dtype, func=None) -> bool:
    """Whether this CPU's `dtype` math is SLOW_RATIO times slower than its float32 math, for `func`'s kind: a
    matrix product (the least CPU time of five 128x256x256 products, about 0.1 ms in float32, a slow 16-bit one
    about 5 ms) or a convolution, forward and backward (a CPU with fast float16 products can still take 160x
    float32's time for a float16 convolution's backward: an AVX-512 EPYC, 90 ms against 0.6), each measured once
    after a run to warm up. The convolution has 32 channels on a 16x16 image: with 16 on 12x12 the call's fixed
    cost hid a 15x slower kernel (1.7x measured on that EPYC, whose float16 Conv1d steps then ran 12x slower
    than float32's). The process's CPU time, which other processes' load does not add to.
    PERFAUDIT_HALF_MATH=float32 or =native decides it instead (the tests run both paths on any CPU)."""
    forced = os.environ.get("PERFAUDIT_HALF_MATH")
    if forced in ("float32", "native"):
        return forced == "float32"
    key = (dtype, func in CONVOLUTIONS)
    if key not in _slow:
        with _cpu_autocast_off(), torch.enable_grad():  # asked inside a region: its math would all be 16-bit
            run: Callable = _convolution if key[1] else torch.mm
            args = ((torch.randn(2, 32, 16, 16, device="cpu"), torch.randn(32, 32, 3, 3, device="cpu")) if key[1]
                    else (torch.randn(128, 256, device="cpu"), torch.randn(256, 256, device="cpu")))
            _slow[key] = _best(run, [a.to(dtype) for a in args]) > SLOW_RATIO * _best(run, list(args))
    return _slow[key]


def _convolution(x: Tensor, w: Tensor) -> None:
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    F.conv2d(x, w, padding=1).sum().backward()


def _best(run, args: list, rounds: int = 5) -> float:
    run(*args)
    times = []
    for _ in range(rounds):
        start = time.process_time()
        run(*args)
        times.append(time.process_time() - start)
    return min(times)


class InFloat32(torch.autograd.Function):
    """`func(*args)` on tensors already in `dtype` (autocast's casts, made by the caller under autograd), computed
    in float32, returned in `dtype`. The device memory tracked meanwhile (placement.memory) notes the result
    and the gradients, as a GPU's kernels make them, and not the float32 copies. Backward recomputes under
    autograd, differentiably when asked to (a gradient penalty's create_graph=True)."""

    @staticmethod
    def forward(ctx, func, kwargs, dtype, placement, *half):
        ctx.func, ctx.kwargs, ctx.dtype, ctx.placement = func, kwargs, dtype, placement
        ctx.at = [i for i, a in enumerate(half) if isinstance(a, Tensor)]
        ctx.others = [None if isinstance(a, Tensor) else a for a in half]
        # what autograd keeps for a GPU's op: an input another input's gradient needs, never a bias
        needs = ctx.needs_input_grad[4:]
        added = _ADDED.get(func)  # its gradient needs no input, and no input's needs it
        ctx.kept = [i for i in ctx.at if i != added and any(needs[j] for j in ctx.at if j not in (i, added))]
        ctx.shapes = {i: half[i].shape for i in ctx.at}
        ctx.save_for_backward(*(half[i] for i in ctx.kept))
        with _inside_kernel(placement, []) as made:
            with span(ASIDE):
                wide = _float(list(half))
            out = func(*wide, **kwargs)
            with span(ASIDE):
                out = out.to(dtype)
            made.append(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        needs, graph = ctx.needs_input_grad[4:], torch.is_grad_enabled()  # graph: backward's own is wanted
        with span(f"{RANGE}({ctx.dtype})"), _cpu_autocast_off(), \
                _inside_kernel(ctx.placement, []) as made:
            formula = None if graph else formula_grads(ctx, grad, needs)
            if formula is not None:
                made.extend(r for r in formula if r is not None)
                return (None, None, None, None, *formula)
            with span(ASIDE), torch.enable_grad():
                inputs = list(ctx.others)
                for i in ctx.at:  # an input no gradient needs, not kept: zeros of its shape stand for it
                    inputs[i] = torch.zeros(ctx.shapes[i], device="cpu").requires_grad_(bool(needs[i]))
                for i, t in zip(ctx.kept, ctx.saved_tensors):
                    if not t.is_floating_point():
                        inputs[i] = t
                    elif graph and t.requires_grad:
                        inputs[i] = t.float()  # through the saved input: its graph goes on
                    else:
                        inputs[i] = t.detach().float().requires_grad_(bool(needs[i]))
                wanted = [i for i in ctx.at if needs[i] and inputs[i].requires_grad]
                out, wide = ctx.func(*inputs, **ctx.kwargs), grad.float()
            grads = torch.autograd.grad(out, [inputs[i] for i in wanted], wide, create_graph=graph) if wanted else ()
            result: list = [None] * len(needs)
            for i, g in zip(wanted, grads):
                with span(ASIDE):  # the gradient as the GPU's 16-bit kernel makes it
                    result[i] = g.to(ctx.dtype)
            made.extend(r for r in result if r is not None)
        return (None, None, None, None, *result)


def in_float32(func, args, kwargs: dict, dtype: torch.dtype, placement, cache: dict) -> Tensor:
    """`func(*args, **kwargs)` as CUDA's autocast runs it in `dtype` (its inputs cast under autograd, parameters'
    casts kept in `cache`), computed in float32 (InFloat32)."""
    with span(f"{RANGE}({dtype})"), _cpu_autocast_off():
        half = [_cast(a, dtype, cache) if isinstance(a, Tensor) and a.is_floating_point() else a for a in args]
        return InFloat32.apply(func, kwargs, dtype, placement, *half)


def _cast(t: Tensor, dtype: torch.dtype, cache: dict) -> Tensor:
    """`t` in `dtype`; a parameter's cast kept in `cache` until the outermost region ends, as autocast keeps it
    (a GPU holds each layer's 16-bit weights through the forward)."""
    if not (t.is_leaf and t.requires_grad):
        return t.to(dtype)
    hit = cache.get(id(t))
    if hit is None or hit[0] is not t:
        hit = cache[id(t)] = (t, t.to(dtype))
    return hit[1]


@contextlib.contextmanager
def _inside_kernel(placement, made: list):
    """What is allocated inside is the kernel's own, not the device's; what is put in `made` is its output."""
    memory = placement.memory
    if memory is not None:
        memory.in_kernel(True)
    try:
        yield made
    finally:
        if memory is not None:
            memory.in_kernel(False)
            for t in made:
                memory.made_on_device(t, "temporaries")


# the CPU's autocast flag: by device type since torch 2.4, its own functions before
if hasattr(torch, "get_autocast_dtype"):
    def _cpu_autocast() -> bool: return torch.is_autocast_enabled("cpu")
    def _set_cpu_autocast(on: bool) -> None: torch.set_autocast_enabled("cpu", on)
    def _cpu_autocast_dtype() -> torch.dtype: return torch.get_autocast_dtype("cpu")
else:
    def _cpu_autocast() -> bool: return torch.is_autocast_cpu_enabled()
    def _set_cpu_autocast(on: bool) -> None: torch.set_autocast_cpu_enabled(on)
    def _cpu_autocast_dtype() -> torch.dtype: return torch.get_autocast_cpu_dtype()


def cpu_autocast_type() -> torch.dtype | None:
    """The type of the CPU's enabled autocast (the emulated device's shadow of a CUDA region), else None."""
    return _cpu_autocast_dtype() if _cpu_autocast() else None


@contextlib.contextmanager
def _cpu_autocast_off():
    """The CPU's autocast off inside, set by its flag: a `torch.autocast` region would be the script's own in
    the records (autocast.py notes every region entered)."""
    was = _cpu_autocast()
    _set_cpu_autocast(False)
    try:
        yield
    finally:
        _set_cpu_autocast(was)


def _float(items: list) -> list:
    return [a.float() if isinstance(a, Tensor) and a.is_floating_point() else a for a in items]


def _operands_flat(func, args: tuple) -> tuple:
    """`torch.einsum(eq, [a, b])`, the older form, as `einsum(eq, a, b)`: each operand an input of its own."""
    if func is torch.einsum and len(args) == 2 and isinstance(args[1], (list, tuple)):
        return (args[0], *args[1])
    return args


def half_math_handler(mode, dtype: torch.dtype):
    """The mode's handler for MATRIX_FUNCTIONS inside an enabled region of `dtype` on a slow CPU; its `cache`
    (parameters' casts) is cleared when the outermost region ends."""
    cache: dict = {}

    def handle(func, args, kwargs):
        on_device = mode.on_device
        args = _operands_flat(func, args)
        if "out" in kwargs or not any(type(a) is Tensor and on_device.has(a) for a in args) or any(
                isinstance(a, Tensor) and a.dtype == torch.float64 for a in args):  # CUDA's autocast: device
            return mode.DEFAULT  # tensors only, and no float64 (torch's own path says what it does)
        out = in_float32(func, args, kwargs, dtype, mode, cache)
        mode.device_ops += 1
        on_device.add(out)
        return out
    handle.cache = cache  # type: ignore[attr-defined]
    return handle


HALF_TYPES = (torch.bfloat16, torch.float16)


def half_model_handler(mode):
    """The mode's handler for MATRIX_FUNCTIONS where no enabled autocast region decides: a model made 16-bit
    (`.half()`, `.to(torch.bfloat16)`, a checkpoint loaded in bfloat16) computes its products in that type on a
    GPU; on a CPU whose products in it are slow (slow_half), InFloat32 computes them in float32 and returns
    the type. Every other call (float32 math: one check; host tensors; types mixed, which the script's own call
    refuses; a CPU autocast region the script entered) takes the mode's own path."""
    def handle(func, args, kwargs):
        args = _operands_flat(func, args)
        operands = args[1:] if func is torch.einsum else args  # an einsum's equation aside
        first = operands[0] if operands else None
        if not isinstance(first, Tensor) or first.dtype not in HALF_TYPES:
            return mode.DEFAULT
        dtype, tensors = first.dtype, [a for a in operands if isinstance(a, Tensor)]
        if "out" in kwargs or any(t.dtype != dtype for t in tensors) or _cpu_autocast() or not any(
                mode.on_device.has(t) for t in tensors) or not slow_half(dtype, func):
            return mode.DEFAULT
        with span(f"{RANGE}({dtype})"):
            out = InFloat32.apply(func, kwargs, dtype, mode, *args)
        mode.device_ops += 1
        mode.on_device.add(out)
        return out
    return handle


def slow_half_type(t) -> torch.dtype | None:
    """The 16-bit type a GPU would run `t`'s op in (an enabled autocast region's, else `t`'s own) where this CPU's
    products in it are slow (slow_half); None where the CPU's own kernel serves (float32, float64)."""
    if not isinstance(t, Tensor) or t.dtype == torch.float64:
        return None
    dtype = cpu_autocast_type() or t.dtype
    return dtype if dtype in HALF_TYPES and slow_half(dtype) else None


# -- an op computed in float32 once, its graph kept for backward (recurrent layers, attention) ----------------
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
            with span(ASIDE):  # the float32 copies: no GPU makes them (projection/timeline.py)
                wide = [t.detach().float().requires_grad_(bool(need)) if isinstance(t, Tensor)
                        and t.is_floating_point() else t for t, need in zip(half, needs)]
            saved = _Saved(wide)
            with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
                outs = func(*_rebuild(wide, layout))
            single = isinstance(outs, Tensor)
            outs = (outs,) if single else tuple(outs)
            with span(ASIDE):
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
        with span(f"{RANGE}({ctx.dtype})"), _cpu_autocast_off(), \
                _inside_kernel(ctx.placement, []) as made:
            with span(ASIDE):
                pairs = [(o, g.float()) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
            if pairs and wanted:
                got = torch.autograd.grad([o for o, _ in pairs], [wide[i] for i in wanted], [g for _, g in pairs],
                                          retain_graph=True, allow_unused=True)  # a second backward, as on a GPU
                with span(ASIDE):  # the gradients as the GPU's 16-bit kernel makes them
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
    with span(f"{RANGE}({dtype})"), _cpu_autocast_off():
        half = [t.to(dtype) if isinstance(t, Tensor) and t.is_floating_point() else t for t in flat]
        return KeptInFloat32.apply(func, layout, dtype, placement, reserve, *half)
