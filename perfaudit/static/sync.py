"""T01: reads of device values and synchronize() inside the training step."""
from __future__ import annotations

import ast

from ..calls import HOST_READS, call_name
from .registry import check, hit


@check("SYNC001", ast.Call)
def host_read_in_step(node: ast.Call, scope):
    name = call_name(node)
    if scope.in_step and name in HOST_READS and isinstance(node.func, ast.Attribute) and not node.args:
        yield hit("SYNC001", node, f"`.{name}()` inside the training loop copies to the host and syncs every step")


@check("SYNC001", ast.Call)
def synchronize_in_step(node: ast.Call, scope):
    if scope.in_step and call_name(node) == "synchronize":
        yield hit("SYNC001", node, f"`{ast.unparse(node.func)}()` inside the training loop blocks every step")
