"""scaled_dot_product_attention on the emulated device, held in memory as a GPU's kernel holds it.

Where the CPU takes SDPA's math path (dropout in training, or inputs its flash kernel does not take), it
builds the Sq x Sk attention weights, the dropout mask and, in backward, their gradients, and autograd
saves them: O(S²) per layer. A GPU's flash or memory-efficient kernel (every NVIDIA GPU torch supports
since sm50) never allocates them; it saves its output and one log-sum-exp per query row (float32) for
backward. While device memory is tracked (device_memory.py), what the math path allocates (scaled copies
of the inputs, the weights, the mask, and in backward their gradients) is noted as not the device's; the
kernel's output (laid out as the kernel lays it out, so that the `.transpose(1, 2).contiguous()` after it
copies nothing, as on a GPU) and log-sum-exp are held until its backward has made the inputs' gradients.
"""
from __future__ import annotations

import functools
import types

import torch
import torch.nn.functional as F
from torch import Tensor

from .precision.half_math import kept_in_float32, slow_half_type

_NAMES = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _math_path(a: dict) -> bool:
    """Whether the CPU runs this call on SDPA's math path (not its flash kernel)."""
    try:
        from torch.nn.attention import SDPBackend
        choice = torch._fused_sdp_choice(a["query"], a["key"], a["value"], a.get("attn_mask"),
                                         float(a.get("dropout_p") or 0.0), bool(a.get("is_causal")),
                                         scale=a.get("scale"), enable_gqa=bool(a.get("enable_gqa")))
        return choice == SDPBackend.MATH.value
    except Exception:  # noqa: BLE001 - another torch: dropout is what sends training to the math path
        return float(a.get("dropout_p") or 0.0) > 0


def attend(placement, func, args: tuple, kwargs: dict):
    """The call, run as it is, its output on the device when an input is; on the math path, laid out and
    held in memory as a GPU's kernel would."""
    a = dict(zip(_NAMES, args), **kwargs)
    q, k, v = a.get("query"), a.get("key"), a.get("value")
    inputs = [t for t in (q, k, v) if isinstance(t, Tensor)]
    on_device = any(placement.on_device.has(t) for t in inputs)
    half = slow_half_type(q) if on_device and len(inputs) == 3 else None
    math = on_device and len(inputs) == 3 and _math_path(a)
    if half is None and not math:
        out = _run(func, args, kwargs, on_device)
    else:
        if half is not None:  # float32 math in the 16-bit type, its memory noted as a kernel's
            out = _in_float32(placement, func, a, half)
        memory = placement.memory
        if memory is not None:
            memory.in_kernel(True)
        try:
            if half is None:
                out = _run(func, args, kwargs, on_device)
            if math and isinstance(out, Tensor) and out.dim() == 4:  # a GPU kernel lays it out (B, S, H, D)
                out = out.transpose(1, 2).contiguous().transpose(1, 2)
        finally:
            if memory is not None:
                memory.in_kernel(False)
        if isinstance(out, Tensor) and out.grad_fn is not None:
            _saved_as_a_kernel_saves(placement, out, inputs)
    if on_device and isinstance(out, Tensor):
        placement.device_ops += 1
        placement.on_device.add(out)
    return out


def _in_float32(placement, func, a: dict, dtype: torch.dtype) -> Tensor:
    """The call computed in float32 once, its graph kept for backward (half_math.KeptInFloat32: its dropout drawn
    once; computing it again in backward doubled the attention's time), its inputs and result in `dtype`, as a
    GPU's 16-bit kernel takes and makes them; what the GPU's kernel holds is the caller's to say."""
    positional = [a["query"], a["key"], a["value"], a.get("attn_mask"), float(a.get("dropout_p") or 0.0),
                  bool(a.get("is_causal"))]
    named = {n: a[n] for n in ("scale", "enable_gqa") if n in a}
    return kept_in_float32(functools.partial(func, **named) if named else func, positional, dtype, placement,
                           reserve=False)


def _run(func, args: tuple, kwargs: dict, on_device: bool):
    """The call; on the device, with the CPU's own kernels when the script chose only a GPU's
    (`sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION)`: the CPU has no memory-efficient kernel; the older
    `torch.backends.cuda.sdp_kernel(enable_math=False)`: training's dropout needs the CPU's math path)."""
    try:
        return func(*args, **kwargs)
    except RuntimeError as exc:
        if not on_device or not any(m in str(exc) for m in ("No viable backend", "No available kernel")):
            raise
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):
        return func(*args, **kwargs)


def _saved_as_a_kernel_saves(placement, out: Tensor, inputs: list) -> None:
    """The kernel's inputs and output held until its backward has made the inputs' gradients, as autograd
    holds them on a GPU, with its log-sum-exp; that backward, on the math path again, marked as the
    kernel's. Hooks on every call (a step's memory may be tracked from its backward on); each reads the
    tracker as it runs."""
    node = out.grad_fn
    if node is None:
        return
    memory = placement.memory
    lse = memory.kernel_keeps(out, inputs) if memory is not None else None
    held = [out, *inputs] if lse is not None else []
    waiting = {id(t) for t in inputs if t.requires_grad}

    def backward_begins(grad_outputs):
        if placement.memory is not None:
            placement.memory.in_kernel(True)

    def made(key: int):  # the tensor's id, not the tensor: a hook that held its tensor would keep it alive
        def hook(grad):  # the kernel's dq, dk or dv
            tracker = placement.memory
            if tracker is not None:
                tracker.made_on_device(grad, "temporaries")
            waiting.discard(key)
            if not waiting:
                held.clear()
                if tracker is not None:
                    tracker.in_kernel(False)
                    if lse is not None:
                        tracker.released(lse)
        return hook
    node.register_prehook(backward_begins)
    for key, t in {id(t): t for t in inputs if t.requires_grad}.items():
        t.register_hook(made(key))


def multi_head(placement, func, args: tuple, kwargs: dict):
    """`F.multi_head_attention_forward` (nn.MultiheadAttention, nn.Transformer*) reaches the mode as one call,
    which runs with the mode off: on device tensors its body runs with the mode on, so that its projections and
    its scaled_dot_product_attention are the device's ops as a GPU runs them (the attention held in memory as a
    kernel holds it, 16-bit products in float32 on a CPU slow at them)."""
    if not any(type(t) is Tensor and placement.on_device.has(t) for t in args[:3]):
        return placement.DEFAULT
    with placement:
        return _unchecked(func)(*args, **kwargs)


def _unchecked(func):
    """`func` (a Python function of torch.nn.functional) without its has_torch_function check: under the mode its
    body runs instead of coming back to the mode. Its module's names read as it calls it, as torch's own are."""
    names = dict(func.__globals__, has_torch_function=lambda *_: False)
    copy = types.FunctionType(func.__code__, names, func.__name__, func.__defaults__, func.__closure__)
    copy.__kwdefaults__ = func.__kwdefaults__
    return copy


def attention_handlers(placement) -> dict:
    """The mode's handlers of attention calls."""
    return {torch._C._nn.scaled_dot_product_attention: lambda f, a, k: attend(placement, f, a, k),
            F.multi_head_attention_forward: lambda f, a, k: multi_head(placement, f, a, k)}
