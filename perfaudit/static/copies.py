"""T17: tensors created on the host, then moved to the device, every step."""
from __future__ import annotations

import ast

from ..calls import call_name, creates_on_host
from .registry import check, hit


@check("COPY002", ast.Call)
def created_then_moved(node: ast.Call, scope):
    name = call_name(node)
    if not (scope.in_step and name in ("cuda", "to") and isinstance(node.func, ast.Attribute)):
        return
    receiver = node.func.value
    moved = name == "cuda" or any("device" in ast.unparse(a) or "cuda" in ast.unparse(a) for a in node.args)
    if moved and (creates_on_host(receiver) or (isinstance(receiver, ast.Name) and receiver.id in scope.host_vars)):
        yield hit("COPY002", node, f"`{ast.unparse(node)}` creates on the host, then copies to the device")
