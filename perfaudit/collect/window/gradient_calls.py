"""Gradients computed without backward(): `torch.autograd.grad` (hand-written updates, meta-learning, a
functional training loop) and torch.func's transforms (per-sample gradients with `vmap(grad(f))`, a
`vjp`'s function). A loop that trains so steps no optimizer and calls no backward(): each such call is its
backward pass, a step marker like backward() (steps.py), so the loop is measured rather than reported as
never having trained.

A call counts once: one inside another (a gradient penalty's double backward), inside a transform (torch.func
computes its gradients with it) or inside a backward pass (a custom Function's, the emulated device's float32 math)
is part of the outer one, which a transform's outermost call marks when it ends. perfaudit's saved-tensors watch
(the step's memory) is set aside for a transform's outermost call: torch.func refuses any such hook."""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from ..emulation.memory.saved_tensors import saved_tensors_aside
from ..func_transforms import outside_transforms, wrap_transforms
from ..wrap import patch


def watch_gradient_calls(torch, before: Callable, after: Callable) -> None:
    """`before(outputs)` and `after()` around each outermost gradient computation that is not backward()."""
    state = threading.local()

    current_node = getattr(torch._C, "_current_autograd_node", lambda: None)  # the node backward runs, else None

    def outside() -> bool:
        return not getattr(state, "busy", False) and outside_transforms() and current_node() is None

    original_grad = torch.autograd.grad

    @functools.wraps(original_grad)
    def grad(*args, **kwargs):
        if not outside():
            state.gradients = True  # a transform's own, or one inside another: the outer call marks
            return original_grad(*args, **kwargs)
        before(args[0] if args else kwargs.get("outputs"))
        state.busy = True
        try:
            return original_grad(*args, **kwargs)
        finally:
            state.busy = False
            after()

    patch(torch.autograd, "grad", grad)

    def following(transformed):
        """`transformed`, marking a backward when an outermost call of it computed gradients."""
        @functools.wraps(transformed)
        def run(*args, **kwargs):
            if not outside():
                return transformed(*args, **kwargs)
            state.busy, state.gradients = True, False
            try:
                with saved_tensors_aside():
                    return transformed(*args, **kwargs)
            finally:
                state.busy = False
                if state.gradients:
                    before(None)
                    after()
        return run

    def returning_function(transform):
        @functools.wraps(transform)
        def make(*args, **kwargs):
            return following(transform(*args, **kwargs))
        return make

    def returning_pair(transform):
        @functools.wraps(transform)
        def apply(*args, **kwargs):
            with saved_tensors_aside():  # vjp runs the function forward now
                out, function, *aux = transform(*args, **kwargs)  # vjp(..., has_aux=True) adds the aux
            return (out, following(function), *aux)
        return apply

    wrap_transforms(returning_function, returning_pair)
