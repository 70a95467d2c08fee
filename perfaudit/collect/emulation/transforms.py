"""torch.func's transforms (vmap, grad, jacrev, vjp, …) on the emulated device.

A transform runs the script's function on wrapped tensors and unwraps what it returns in C++: the placement
mode never sees those results made, so per-sample gradients of device parameters (the DP-SGD recipe) came
back as tensors of no known device, and what the script did with them was not the device's (no read of them
a sync, `randn_like` of them taken for the host). On a GPU they are on the device of what went in: so here,
at the outermost transform (inside one, tensors are the transform's wrappers)."""
from __future__ import annotations

import functools

import torch
from torch.utils._pytree import tree_leaves

from ..func_transforms import outside_transforms, wrap_transforms


def follow_func_transforms(mode) -> None:
    """Each transform of torch.func gives what it returns the device of what it was given."""
    wrap_transforms(lambda transform: _returning_functions(mode, transform),
                    lambda transform: _returning_outputs(mode, transform))


def _placed(mode, given) -> bool:
    """Whether a transform's results are on the device: something it was given is, or it was given no tensor
    (a closure over device parameters) while the device holds some."""
    inputs = [t for t in tree_leaves(given) if isinstance(t, torch.Tensor)]
    return any(mode.on_device.has(t) for t in inputs) or (not inputs and bool(mode.on_device))


def _place(mode, out):
    """`out` with its tensors on the device; its functions (a vjp's) place theirs when called."""
    if isinstance(out, torch.Tensor):
        mode.on_device.add(out)
    elif callable(out):
        return _following(mode, out)
    elif type(out) is tuple:  # a vjp's (outputs, function), grad_and_value's (gradients, value)
        return tuple(_place(mode, o) for o in out)
    else:  # dicts and lists of gradients
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                mode.on_device.add(t)
    return out


def _following(mode, transformed):
    """`transformed`, whose results are placed like its arguments when called outside any transform."""
    @functools.wraps(transformed)
    def run(*args, **kwargs):
        out = transformed(*args, **kwargs)
        return _place(mode, out) if outside_transforms() and _placed(mode, (args, kwargs)) else out
    return run


def _returning_functions(mode, transform):
    @functools.wraps(transform)
    def make(*args, **kwargs):
        return _following(mode, transform(*args, **kwargs))
    return make


def _returning_outputs(mode, transform):
    @functools.wraps(transform)
    def apply(func, *args, **kwargs):
        out = transform(func, *args, **kwargs)
        return _place(mode, out) if outside_transforms() and _placed(mode, (args, kwargs)) else out
    return apply
