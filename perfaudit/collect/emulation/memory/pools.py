"""`torch.cuda.MemPool` and `torch.cuda.use_mem_pool` on the emulated device. A CPU build of torch stubs the pool's
C++ base out ("Tried to instantiate dummy base class _MemPool"), so a script that routes its allocations to a
pool of its own (a custom allocator's buffers, memory kept apart for NCCL) could not run its CUDA branch at all.
Here a pool is what a GPU's is to the script: an id, a use count, a snapshot; the tensors made inside
`use_mem_pool` are computed on the CPU like the rest, and counted in the device's memory like the rest. A raw
block of device memory (`caching_allocator_alloc`: a pointer for a custom kernel) has no answer here: the call
says so by name, and the run falls back to the script's CPU branch with its line."""
from __future__ import annotations

import contextlib
import itertools

import torch

from ...wrap import patch

_ids = itertools.count(1)


class MemPool:
    """A pool of the caching allocator, as torch.cuda.MemPool answers for one (allocator: a
    CUDAPluggableAllocator's, or None for the default; the options are kept, with nothing to apply them to)."""

    def __init__(self, allocator=None, use_on_oom: bool = False, no_split: bool = False):
        self.allocator, self.use_on_oom, self.no_split = allocator, use_on_oom, no_split
        self._id = (0, next(_ids))  # a GPU's user-made pools count from (0, 1) as well
        self._in_use = 0

    @property
    def id(self) -> tuple[int, int]:
        return self._id

    def use_count(self) -> int:
        """The pool's references: this object's, and one more while `use_mem_pool` routes to it."""
        return 1 + self._in_use

    def snapshot(self, include_traces: bool = True) -> list:
        return []  # the emulated device keeps no allocator history (cuda_shim: memory_snapshot)


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device=None):
    """Route the current thread's allocations to `pool` for the block: counted while it lasts."""
    if not isinstance(pool, MemPool):
        raise TypeError(f"use_mem_pool expects a torch.cuda.MemPool, got {type(pool).__name__}")
    pool._in_use += 1
    try:
        yield
    finally:
        pool._in_use -= 1


def _unserved(name: str, what: str):
    def refuse(*args, **kwargs):
        raise RuntimeError(f"torch.cuda.{name} ({what}) is not served by perfaudit's emulated CUDA device")
    refuse.__name__ = refuse.__qualname__ = name
    return refuse


def serve_mem_pools() -> None:
    memory = torch.cuda.memory
    for name in ("caching_allocator_alloc", "caching_allocator_delete"):
        refuse = _unserved(name, "a raw device pointer")
        for module in (torch.cuda, memory):
            if hasattr(module, name):
                patch(module, name, refuse)
    if not hasattr(memory, "MemPool"):  # a torch before pools (2.5): nothing a script could call
        return
    for module in (torch.cuda, memory):
        patch(module, "MemPool", MemPool)
        if hasattr(module, "use_mem_pool"):
            patch(module, "use_mem_pool", use_mem_pool)
