"""T07: debugging APIs left on."""
from __future__ import annotations

import ast

from ..calls import call_name, literal
from .registry import Hit, check, hit


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


def memory_history_left_on(tree: ast.AST) -> list[Hit]:
    """The CUDA allocator's memory history turned on (`torch.cuda.memory._record_memory_history(...)`, its
    `enabled` left to its default "all" or given as a literal) and never turned off in the file: every
    allocation and free then takes a stack trace, as long as the script runs. A warning, as the run gives it.
    One turned off again in the file (recording a few steps, then `enabled=None`), or switched by a variable
    (the user's option), is left to the run, which sees whether it records through the measured steps."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and call_name(n) == "_record_memory_history"]
    switched = [(n, n.args[0] if n.args else next((k.value for k in n.keywords if k.arg in ("enabled", None)), None))
                for n in calls]  # a `**options` may hold `enabled`: unknown, as a variable is
    if any(not isinstance(value, ast.Constant) or value.value in (None, False) for _, value in switched
           if value is not None):
        return []
    return [Hit("DEBUG001", n.lineno, "the CUDA memory history is turned on and never off in this file",
                severity="warning") for n, _ in switched]
