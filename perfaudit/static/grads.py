"""T02: gradients zero-filled instead of set to None."""
from __future__ import annotations

import ast

from ..calls import call_name, literal_kwargs
from .registry import check, hit


@check("GRAD001", ast.Call)
def zero_grad_without_none(node: ast.Call, scope):
    if call_name(node) == "zero_grad" and literal_kwargs(node).get("set_to_none") is False:
        yield hit("GRAD001", node, "`zero_grad(set_to_none=False)` zero-fills every gradient each step")


@check("GRAD001", ast.Call)
def manual_grad_fill(node: ast.Call, scope):
    if call_name(node) in ("zero_", "fill_") and isinstance(node.func, ast.Attribute) \
            and "grad" in ast.unparse(node.func.value):
        yield hit("GRAD001", node, f"`{ast.unparse(node.func)}()` zero-fills a gradient; set it to None")
