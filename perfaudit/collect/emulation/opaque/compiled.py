"""torch.compile's code runs with the placement mode set aside (the mode would be traced into its graphs)."""
from __future__ import annotations

import contextlib
import functools

import torch

from ...internal import record_internal_error
from .follow import given_the_device, place_outputs


def on_top(mode) -> bool:
    """Whether the placement mode is the innermost torch function mode (False on a torch that cannot say)."""
    depth = getattr(torch._C, "_len_torch_function_stack", lambda: 0)()
    return bool(depth) and torch._C._get_function_stack_at(depth - 1) is mode


def compiled_code_without_the_mode(mode) -> None:
    """torch.compile traces every active TorchFunctionMode into the graph, and the placement mode's own
    bookkeeping would break the script's graphs (COMPILE001 on lines that break nowhere on a GPU).
    Compiled code runs with the mode set aside; what it returns is on the device when what it was given
    (or the module it runs) is."""
    original_compile = torch.compile
    patched: list = []

    def patch_dynamo() -> None:
        from torch._dynamo.eval_frame import OptimizeContext
        original_call = OptimizeContext.__call__

        def __call__(self, fn):
            compiled = original_call(self, fn)
            if isinstance(compiled, torch.nn.Module) or not callable(compiled):
                return compiled
            owner = getattr(fn, "__self__", None)

            @functools.wraps(compiled)
            def run_compiled(*args, **kwargs):
                placed = given_the_device(mode, owner, args, kwargs)
                aside = torch.overrides._pop_mode_temporarily() if on_top(mode) else contextlib.nullcontext()
                with aside:
                    out = compiled(*args, **kwargs)
                if placed:
                    place_outputs(mode, out)
                return out
            return run_compiled

        setattr(OptimizeContext, "__call__", __call__)  # noqa: B010

    @functools.wraps(original_compile)
    def compile(*args, **kwargs):
        if not patched:
            try:
                patch_dynamo()
            except Exception as exc:  # noqa: BLE001 - a torch without this class: graphs trace the mode
                record_internal_error("CUDA emulation", exc)
            patched.append(True)
        return original_compile(*args, **kwargs)

    torch.compile = compile
