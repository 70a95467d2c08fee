"""T03: a Conv/Linear with bias directly followed by BatchNorm."""
from __future__ import annotations

import ast

from ..calls import call_name, literal_kwargs
from .registry import check, hit


def _layer_then_norm(calls):
    for layer, norm in zip(calls, calls[1:]):
        if not (isinstance(layer, ast.Call) and isinstance(norm, ast.Call)):
            continue
        lname, nname = call_name(layer) or "", call_name(norm) or ""
        if (lname.startswith("Conv") or lname == "Linear") and nname.startswith("BatchNorm") \
                and literal_kwargs(layer).get("bias") is not False:
            yield hit("BN001", layer, f"`{lname}` with bias=True feeds `{nname}`, which cancels the bias")


@check("BN001", ast.Call)
def in_sequential(node: ast.Call, scope):
    if call_name(node) == "Sequential":
        yield from _layer_then_norm(node.args)


@check("BN001", ast.FunctionDef)
def in_init(node: ast.FunctionDef, scope):
    """`self.conv = nn.Conv2d(...)` (bias on) directly followed by `self.bn = BatchNorm…(...)`."""
    if node.name == "__init__":
        yield from _layer_then_norm([s.value for s in node.body if isinstance(s, ast.Assign)
                                     and isinstance(s.value, ast.Call)])
