"""Importing this package registers every fact."""
from . import comm, compiled, copies, data, ddp, debug, gpu_time, grads, model, optim, probed, ranks, shapes, startup, steps, sync  # noqa: F401
from .registry import FACTS, Context, Missing, fact
from .sites import Site

__all__ = ["FACTS", "Context", "Missing", "Site", "fact"]
