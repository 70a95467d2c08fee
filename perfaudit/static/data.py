"""T05: a DataLoader that loads in the training process."""
from __future__ import annotations

import ast

from ..calls import call_name, has_star_kwargs, literal_kwargs
from .registry import check, hit


@check("DATA001", ast.Call)
def loader_without_workers(node: ast.Call, scope):
    if call_name(node) != "DataLoader":
        return
    kwargs = literal_kwargs(node)
    if "num_workers" not in kwargs and has_star_kwargs(node):
        return  # DataLoader(..., **kwargs): the workers may be set there; say nothing
    if kwargs.get("num_workers", 0) == 0:
        yield hit("DATA001", node, "DataLoader without workers (num_workers=0): batches load in the training process")
