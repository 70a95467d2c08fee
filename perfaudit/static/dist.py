"""T15: nn.DataParallel."""
from __future__ import annotations

import ast

from ..calls import call_name
from .registry import check, hit


@check("DIST001", ast.Call)
def data_parallel(node: ast.Call, scope):
    if call_name(node) == "DataParallel":
        yield hit("DIST001", node, "`nn.DataParallel`: use DistributedDataParallel")
