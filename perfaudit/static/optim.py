"""T10: optimizers asked for their per-parameter loop."""
from __future__ import annotations

import ast

from ..calls import FOREACH_OPTIMIZERS, call_name, literal_kwargs
from .registry import check, hit


@check("OPT001", ast.Call)
def single_tensor_optimizer(node: ast.Call, scope):
    name = call_name(node)
    kwargs = literal_kwargs(node)
    if name in FOREACH_OPTIMIZERS and kwargs.get("fused") is not True \
            and (kwargs.get("foreach") is False or kwargs.get("fused") is False):
        yield hit("OPT001", node, f"`{name}(..., foreach=False)` runs the per-parameter loop")
