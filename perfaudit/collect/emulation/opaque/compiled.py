"""torch.compile's code runs with the placement mode set aside (the mode would be traced into its graphs). Code
compiled for CUDA graphs (`mode="reduce-overhead"`, `"max-autotune"`) runs on a GPU as graph replays: its forward
and backward are marked so (probe_schema.GRAPH_RANGE), for the projection to launch each at once."""
from __future__ import annotations

import contextlib
import functools

import torch
from torch.utils._pytree import tree_leaves

from ....probe_schema import GRAPH_RANGE
from ...internal import record_internal_error
from ..marks import span
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
            graphs = _for_cuda_graphs(self)

            @functools.wraps(compiled)
            def run_compiled(*args, **kwargs):
                placed = given_the_device(mode, owner, args, kwargs)
                aside = torch.overrides._pop_mode_temporarily() if on_top(mode) else contextlib.nullcontext()
                with aside, span(GRAPH_RANGE) if graphs and placed else contextlib.nullcontext():
                    out = compiled(*args, **kwargs)
                if placed:
                    place_outputs(mode, out)
                    if graphs:
                        _backward_as_a_graph(out)
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


def _for_cuda_graphs(context) -> bool:
    """Whether a torch.compile context's backend asks for CUDA graphs (inductor's `triton.cudagraphs`, which
    `mode="reduce-overhead"` and `"max-autotune"` set)."""
    try:
        from torch._dynamo.eval_frame import innermost_backend
        config = getattr(innermost_backend(context.callback), "config", None)
        return bool(isinstance(config, dict) and config.get("triton.cudagraphs"))
    except Exception:  # noqa: BLE001 - a torch without these: launched kernel by kernel
        return False


def _backward_as_a_graph(out) -> None:
    """The compiled backward behind what a compiled forward returned runs as one graph replay too: its node is
    marked from its pre-hook to its hook (each forward makes a node of its own)."""
    nodes = {id(t.grad_fn): t.grad_fn for t in tree_leaves(out)
             if isinstance(t, torch.Tensor) and t.grad_fn is not None and "Compiled" in type(t.grad_fn).__name__}
    for node in nodes.values():
        opened: list = []

        def pre(grad_outputs, opened=opened):
            opened.append(span(GRAPH_RANGE))
            opened[-1].__enter__()

        def post(grad_inputs, grad_outputs, opened=opened):
            if opened:
                opened.pop().__exit__(None, None, None)

        node.register_prehook(pre)
        node.register_hook(post)
