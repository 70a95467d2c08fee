"""Links from host ops to the GPU work they launched (runtime call correlation ids)."""
from __future__ import annotations

from collections import defaultdict

from ...trace.model import Event
from ...trace.nesting import innermost
from ..registry import Context


def runtime_calls(ctx: Context) -> list[Event]:
    return ctx.host_of("runtime")


def device_by_correlation(ctx: Context) -> dict:
    cache = ctx.__dict__.get("_device_by_corr")
    if cache is None:
        cache = defaultdict(list)
        for ev in ctx.need_trace().device:
            corr = ev.args.get("correlation")
            if corr is not None:
                cache[corr].append(ev)
        ctx.__dict__["_device_by_corr"] = cache
    return cache


def device_events_by_op(ctx: Context, ops: list[Event]) -> dict[int, list[Event]]:
    """id(op) -> device events launched by runtime calls made inside that op."""
    runtime = runtime_calls(ctx)
    owner = innermost(ops, runtime, ctx.by_thread(ops))
    by_corr = device_by_correlation(ctx)
    out: dict[int, list[Event]] = defaultdict(list)
    for rt in runtime:
        op = owner.get(id(rt))
        if op is not None:
            out[id(op)].extend(by_corr.get(rt.args.get("correlation"), ()))
    return out


def runtime_of_device(ctx: Context) -> dict:
    """correlation id -> the runtime call that launched it."""
    cache = ctx.__dict__.get("_runtime_by_corr")
    if cache is None:
        cache = {rt.args["correlation"]: rt for rt in runtime_calls(ctx) if "correlation" in rt.args}
        ctx.__dict__["_runtime_by_corr"] = cache
    return cache
