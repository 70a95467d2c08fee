"""Activation checkpointing on the emulated device. torch.utils.checkpoint compares what its recompute saves
with what the forward saved: shape, dtype and device. The emulated device's tensors are the CPU's, and which of
them read as the device's depends on where the check looks: the forward's are read while an op runs (the mode
set aside: the CPU), the recompute's in the backward pass, and a custom autograd Function's forward saves under
the mode (the device). A segmentation trainer whose checkpointed stages end in such a Function raised
CheckpointError before its first step. The comparison keeps shapes and dtypes; the device is the same by
construction, as on a GPU."""
from __future__ import annotations

import functools


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
