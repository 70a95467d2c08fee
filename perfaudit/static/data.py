"""T05: a DataLoader that loads in the training process."""
from __future__ import annotations

import ast

from ..calls import call_name, resolved_kwargs
from .registry import check, hit


@check("DATA001", ast.Call)
def loader_without_workers(node: ast.Call, scope):
    if call_name(node) != "DataLoader":
        return
    kwargs = resolved_kwargs(node, scope.dicts)
    if kwargs is None:
        return  # DataLoader(..., **kwargs) built out of sight: the workers may be set there; say nothing
    if kwargs.get("num_workers", 0) == 0:
        yield hit("DATA001", node, "DataLoader without workers (num_workers=0): batches load in the training process")
