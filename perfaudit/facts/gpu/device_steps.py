"""The busiest GPU's events, the part of them in each measured step, and what each distinct kernel name is
(matrix precision, collective, small elementwise): worked out once for every fact that reads them, the
names classified once each, not once per event."""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from ...trace.model import Event
from ..registry import Context
from .kernels import is_collective, is_small_elementwise, kernel_class


def device_events(ctx: Context) -> list[Event]:
    """Device events of the busiest device (one GPU per process is the norm), GPU annotations left out."""
    cached = ctx.__dict__.get("_main_device_events")
    if cached is None:
        devices = Counter(e.pid for e in ctx.need_trace().device if e.kind != "gpu_annotation")
        main = devices.most_common(1)[0][0]
        cached = ctx.__dict__["_main_device_events"] = [e for e in ctx.need_trace().device
                                                        if e.pid == main and e.kind != "gpu_annotation"]
    return cached


def per_step(ctx: Context) -> list[list[Event]]:
    """For each measured step, the busiest device's events that overlap it (sorted by start)."""
    cached = ctx.__dict__.get("_device_per_step")
    if cached is None:
        events = device_events(ctx)
        cached = ctx.__dict__["_device_per_step"] = [ctx.overlapping(events, s.ts, s.end) for s in ctx.steps]
    return cached


class Traits(NamedTuple):
    precision: str | None   # "half", "tf32" or "fp32" for a matrix kernel, else None
    collective: bool        # NCCL/RCCL communication
    small_elementwise: bool  # a pointwise kernel: a fusion candidate when short


def traits(ctx: Context) -> dict[str, Traits]:
    """What each distinct kernel name on the busiest device is."""
    cached = ctx.__dict__.get("_kernel_traits")
    if cached is None:
        names = {e.name for e in device_events(ctx) if e.kind == "kernel"}
        cached = ctx.__dict__["_kernel_traits"] = {
            n: Traits(kernel_class(n), is_collective(n), is_small_elementwise(n)) for n in names}
    return cached
