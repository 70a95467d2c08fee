"""T18: torch.cuda.empty_cache() in the step."""
from __future__ import annotations

import ast

from ..calls import call_name
from .registry import check, hit


@check("MEM001", ast.Call)
def empty_cache_in_step(node: ast.Call, scope):
    if scope.in_step and call_name(node) == "empty_cache":
        yield hit("MEM001", node, f"`{ast.unparse(node.func)}()` inside the training loop")
