"""Ranges the emulated device writes into the trace for the projection (probe_schema): empty ones where the host
would wait for the GPU and at each host-to-device copy a GPU would make; ranges around its float32 math for a
16-bit op (precision/half_math.py)."""
from __future__ import annotations

from contextlib import nullcontext

import torch
from torch.profiler import record_function

FAST = getattr(torch._C._profiler, "_RecordFunctionFast", None)  # torch >= 2.2: a range without Python around it
_profiling = torch._C._autograd._profiler_enabled


def span(name: str):
    """A range named `name` around what runs inside it (`with span(name): ...`), as cheap as mark()'s; none while
    the profiler is off: a fast range entered then and left once it runs (the window starting inside a backward
    pass) fails torch's internal assert, in the script's step."""
    if FAST is None:
        return record_function(name)
    return FAST(name) if _profiling() else nullcontext()


def mark(name: str) -> None:
    """An empty range named `name`: a microsecond with the fast record function, 13 with record_function's
    context manager (with the profiler's Python tracer on: per read or copy of a step)."""
    with span(name):
        pass
