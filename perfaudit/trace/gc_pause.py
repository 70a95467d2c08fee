"""Python's cycle collector paused while a trace is read and analysed. The trace model is millions of small
acyclic objects (events, their args): each collection the allocations trigger walks all of them again, and
finds nothing to free (refcounting frees them). Measured on a 317 MB trace: parse 2.7 s -> 2.0 s. The
collector runs again, as it was, once the analysis is done; anything cyclic left meanwhile is freed then."""
from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def collection_paused():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
