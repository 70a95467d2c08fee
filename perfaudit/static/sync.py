"""T01: reads of device values and synchronize() inside the training step."""
from __future__ import annotations

import ast

from ..calls import HOST_READS, call_name
from .registry import Hit, check, hit
from .uses import host_consumer


@check("SYNC001", ast.Call)
def host_read_in_step(node: ast.Call, scope):
    name = call_name(node)
    if scope.in_step and name in HOST_READS and isinstance(node.func, ast.Attribute) and not node.args:
        yield hit("SYNC001", node, f"`.{name}()` inside the training loop copies to the host and syncs every step")


@check("SYNC001", ast.Call)
def synchronize_in_step(node: ast.Call, scope):
    if scope.in_step and call_name(node) == "synchronize":
        yield hit("SYNC001", node, f"`{ast.unparse(node.func)}()` inside the training loop blocks every step")


def needed_reads_left_out(tree: ast.AST, hits: list[Hit]) -> list[Hit]:
    """SYNC001's host reads whose value the program needs (`env.step(action.item())`): a run leaves them out
    of its syncs (facts/gpu/sync.py, with a note), and so does the source."""
    return [h for h in hits if h.rule != "SYNC001" or not host_consumer(tree, h.line)]
