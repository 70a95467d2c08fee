"""T07: debugging APIs left on."""
from __future__ import annotations

import ast

from ..calls import call_name, literal
from .registry import check, hit


@check("DEBUG001", ast.Call)
def anomaly_detection(node: ast.Call, scope):
    name = call_name(node)
    if name == "detect_anomaly" or (name == "set_detect_anomaly" and node.args and literal(node.args[0]) is True):
        yield hit("DEBUG001", node, "anomaly detection is turned on")


@check("DEBUG001", ast.Call)
def debugging_api(node: ast.Call, scope):
    name = call_name(node)
    if name == "emit_nvtx" or (name in ("gradcheck", "gradgradcheck") and scope.loops):
        yield hit("DEBUG001", node, f"`{name}` is a debugging API")
