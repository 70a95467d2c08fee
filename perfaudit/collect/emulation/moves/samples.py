"""`sample.to(device)` inside a Dataset's `__getitem__`, on the emulated device, in one Python frame.

A Dataset that moves each sample to the device makes one move per sample: 32 to 256 a step. The placement
mode's general path (placement.py `_to`, `_copy_in`) costs a dozen Python calls a move, and the profiler
records each of them, so a step of such moves ran 2.6x longer than with `--device cpu`. From the second
move at a line on, the move is recorded here with the same fields the general path keeps (it made the
record at the first move); anything else goes the general way.
"""
from __future__ import annotations

import sys
import threading

import torch

from ....probe_schema import H2D_RANGE
from ...userframes import is_user_file
from ..marks import FAST, mark
from ..tensor_registry import KeyedRef, copied

Tensor = torch.Tensor


def sample_moves(mode):
    """Tensor.to's handler for the mode (placement.Placement): the fast path of a sample moved in a fetch."""
    general, copies, main = mode._to, mode.copies, mode._main_thread
    on_device, pinned, gone = mode._on_device_refs, mode.pinned._refs, mode.on_device._gone
    sites: dict = {}  # (code, line) -> the copies' key of a user's line, or None (not the user's code)
    getframe, get_ident = sys._getframe, threading.get_ident

    def to(func, args, kwargs):
        # every builtin called here is an event of the profiler's Python tracer: dicts are read with `in`
        # and `[]`, sizes with properties
        if not mode.in_fetch or (kwargs and (len(kwargs) != 1 or "non_blocking" not in kwargs)):
            return general(func, args, kwargs)
        try:
            src, target = args
        except ValueError:
            return general(func, args, kwargs)
        if type(src) is not Tensor or not ((type(target) is torch.device and target.type == "cuda")
                                           or (type(target) is str and target.startswith("cuda"))):
            return general(func, args, kwargs)
        known = id(src)
        if (known in on_device and on_device[known][0]() is src) or get_ident() != main:
            return general(func, args, kwargs)
        frame = getframe(2)  # to <- the mode's __torch_function__ <- the line that called .to()
        where = (frame.f_code, frame.f_lineno)
        if where in sites:
            key = sites[where]
        else:
            path = frame.f_code.co_filename
            key = sites[where] = (path, frame.f_lineno, "sample") if is_user_file(path) else None
        entry = copies[key] if key is not None and key in copies else None
        if entry is None:  # the first move at this line (the general path makes the record), or not the user's
            return general(func, args, kwargs)
        nbytes = src.nbytes  # a property: no call the profiler records
        entry["calls"] += 1
        step = mode.window_step()
        if step is not None:
            entry["window_calls"] += 1
            by_step = entry["by_step"]
            step = str(step)
            by_step[step] = by_step[step] + 1 if step in by_step else 1
            entry["window_bytes"] += nbytes
        if nbytes > entry["bytes"]:
            entry["bytes"] = nbytes
        held = id(src)
        is_pinned = held in pinned and pinned[held][0]() is src
        if entry["pinned"] and not is_pinned:
            entry["pinned"] = False
        non_blocking = kwargs["non_blocking"] if kwargs else False
        if entry["non_blocking"] and not non_blocking:
            entry["non_blocking"] = False
        # the copy, for the projection to time: probe_schema.h2d_range's name, inlined (each Python call here is
        # an event of the profiler's Python tracer)
        name = f"{H2D_RANGE} sample {'pinned' if is_pinned else 'pageable'} {'async' if non_blocking else 'blocking'} {nbytes}"
        if FAST is not None:
            with FAST(name):
                pass
        else:
            mark(name)
        out = copied(src)
        mode.placements += 1
        if mode.memory is not None:
            mode.memory.placed(out, "batches")
        ref = KeyedRef(out, gone)
        ref.key = key = id(out)
        on_device[key] = (ref, True)
        return out
    return to
