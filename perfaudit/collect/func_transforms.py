"""Where torch.func's transforms live, for the wrappers that follow them (window/gradient_calls.py: a step's
backward pass; emulation/transforms.py: the device of what they return).

`torch.func.grad` is `torch._functorch.apis.grad`; `torch.vmap` is the same object; functorch's deprecated
names call the defining modules' attributes when called. Each transform is replaced where it is defined and
under each public name it has, before the script imports any of them."""
from __future__ import annotations

from collections.abc import Callable

from .wrap import patch

# transform(func, ...) -> a function of the script's inputs
RETURN_FUNCTIONS = ("vmap", "grad", "grad_and_value", "jacrev", "jacfwd", "hessian")
# transform(func, *primals) -> (outputs, a function of cotangents or tangents[, aux])
RETURN_PAIRS = ("vjp", "linearize")


def outside_transforms() -> bool:
    """Whether no transform is running here: inside one, tensors are its wrappers (functorch's level is set)."""
    import torch
    level = getattr(torch._C._functorch, "maybe_current_level", None)
    return level is None or level() is None


def wrap_transforms(wrap_function: Callable, wrap_pair: Callable) -> None:
    """Each transform replaced by `wrap_function(transform)` or `wrap_pair(transform)` wherever it is named."""
    import torch
    import torch._functorch.apis as apis
    import torch._functorch.eager_transforms as eager
    import torch.func

    for names, wrap in ((RETURN_FUNCTIONS, wrap_function), (RETURN_PAIRS, wrap_pair)):
        for name in names:
            original = getattr(torch.func, name, None)
            if original is None:
                continue
            wrapped = wrap(original)
            for owner in (torch.func, torch, apis, eager):
                if getattr(owner, name, None) is original:
                    patch(owner, name, wrapped)
