"""Activation checkpointing on the emulated device. torch.utils.checkpoint compares what its recompute saves
with what the forward saved: shape, dtype and device. The emulated device's tensors are the CPU's, and which of
them read as the device's depends on where the check looks: the forward's are read while an op runs (the mode
set aside: the CPU), the recompute's in the backward pass, and a custom autograd Function's forward saves under
the mode (the device). A segmentation trainer whose checkpointed stages end in such a Function raised
CheckpointError before its first step. The comparison keeps shapes and dtypes; the device is the same by
construction, as on a GPU.

The recompute itself runs inside the backward pass, which the script started through the mode (`loss.backward()`
is a torch call the mode serves, with itself set aside): without the mode there, the recomputed ops ran on the
CPU unseen, outside CUDA's autocast policy (a GPT-2 MLP's `pow` in bfloat16 where the forward ran it in float32,
and CheckpointError). Both recomputes (non-reentrant and reentrant) run under the mode, as the forward did."""
from __future__ import annotations

import functools

import torch

from ..internal import record_internal_error
from ..wrap import patch


def checkpoint_compares_without_the_device() -> None:
    """torch.utils.checkpoint's determinism check ("default": shape, dtype, device) without the device."""
    try:
        from torch.utils import checkpoint
        checks = checkpoint._allowed_determinism_checks_to_fns
        default = checks["default"]
    except (ImportError, AttributeError, KeyError):  # a torch without the check (before 2.1)
        return

    @functools.wraps(default)
    def metadata(x):
        found = default(x)
        if isinstance(found, dict):
            found.pop("device", None)
        return found

    checks["default"] = metadata


def recompute_under_the_mode(mode) -> None:
    """Each checkpoint's recompute (a non-reentrant _CheckpointFrame's, a reentrant CheckpointFunction's backward)
    runs with `mode` on the thread's torch function stack, unless the script took its CPU branch or the mode is
    there already."""
    checkpoint = getattr(torch.utils, "checkpoint", None)
    frame = getattr(checkpoint, "_CheckpointFrame", None)
    init = getattr(frame, "__init__", None)
    if frame is not None and init is not None:
        @functools.wraps(init)
        def __init__(self, recompute_fn, *args, **kwargs):
            init(self, _under(mode, recompute_fn), *args, **kwargs)
        patch(frame, "__init__", __init__)
    function = getattr(checkpoint, "CheckpointFunction", None)
    backward = getattr(function, "backward", None)
    if function is not None and backward is not None:
        patch(function, "backward", staticmethod(_under(mode, backward)))


def _under(mode, recompute_fn):
    def recompute(*args, **kwargs):
        try:
            stack = [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]
            push = not mode.aside and not any(m is mode for m in stack)
            if push:
                torch._C._push_on_torch_function_stack(mode)
        except Exception as exc:  # noqa: BLE001 - never break the user's backward
            record_internal_error("CUDA emulation", exc)
            push = False
        try:
            return recompute_fn(*args, **kwargs)
        finally:
            if push:
                torch._C._pop_torch_function_stack()
    return recompute
