"""Importing this package registers every fact."""
from . import (  # noqa: F401
    comm,
    compiled,
    copies,
    data,
    ddp,
    debug,
    emulated,
    flops,
    gpu_time,
    grads,
    mfu,
    model,
    op_times,
    optim,
    probed,
    projection,
    ranks,
    shapes,
    startup,
    steps,
    sync,
)
from .registry import FACTS, Context, Missing, fact
from .sites import Site

__all__ = ["FACTS", "Context", "Missing", "Site", "fact"]
