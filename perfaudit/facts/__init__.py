"""Importing this package registers every fact."""
from . import (  # noqa: F401
    compiled,
    data,
    debug,
    emulated,
    model,
    op_times,
    probed,
    shapes,
    startup,
    steps,
)
from .distributed import comm, ddp, ranks  # noqa: F401
from .flops import counted, mfu  # noqa: F401
from .gpu import busy, copies, cudnn, memory, memory_estimate, projection, sync  # noqa: F401
from .registry import FACTS, Context, Missing, fact
from .sites import Site
from .training import grads, optim  # noqa: F401

__all__ = ["FACTS", "Context", "Missing", "Site", "fact"]
