"""What opaque code returns: on the device when what it was given, or the module it runs, is."""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_leaves


def given_the_device(mode, owner, args: tuple, kwargs: dict) -> bool:
    """Whether a call of opaque code works on the device: a tensor it was given is there, or its module's
    first parameter is; with no tensors given, whether the script has put anything there."""
    inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    param = next(owner.parameters(), None) if isinstance(owner, torch.nn.Module) else None
    return (any(mode.on_device.has(t) for t in inputs) or (param is not None and mode.on_device.has(param))
            or (not inputs and bool(mode.on_device)))


def place_outputs(mode, out) -> None:
    for t in tree_leaves(out):
        if isinstance(t, torch.Tensor):
            mode.on_device.add(t)
