"""Profilers the script starts itself (torch.profiler, the legacy autograd profiler, emit_nvtx) would
fight perfaudit's for the one Kineto session: each is recorded where it was started (a debug API left
on, tip T07) and made a no-op, so the audit goes on."""
from __future__ import annotations

import torch

from ..userframes import user_site
from ..wrap import patch


def neutralise_profilers(probes) -> None:
    """A profiler the script starts itself (torch.profiler, the legacy autograd profiler,
    emit_nvtx) would fight perfaudit's for the one Kineto session: record where it was
    started (a debug API left on, T07) and make it a no-op, so the audit goes on."""
    from torch.autograd.profiler_util import EventList

    def note(api):
        site = user_site(4)
        if not any(c["api"] == api and c["site"] == site for c in probes.debug_calls):
            probes.debug_calls.append({"api": api, "enabled": True, "site": site})

    kineto = torch.profiler.profile
    for name in ("start", "stop", "step", "export_chrome_trace", "export_stacks", "export_memory_timeline"):
        original = getattr(kineto, name)

        def guarded(prof, *args, _original=original, _name=name, **kwargs):
            if prof is probes.own_profiler:
                return _original(prof, *args, **kwargs)
            if _name == "start":
                note("torch.profiler.profile")
            return None

        patch(kineto, name, guarded)
    patch(kineto, "key_averages", lambda prof, *a, **k: EventList([]))
    patch(kineto, "events", lambda prof: EventList([]))
    legacy = torch.autograd.profiler.profile
    legacy_enter, legacy_exit = legacy.__enter__, legacy.__exit__

    def own(prof) -> bool:  # torch.profiler drives an autograd profiler of its own
        return prof is getattr(probes.own_profiler, "profiler", None)

    def guarded_enter(prof):
        if own(prof):
            return legacy_enter(prof)
        note("torch.autograd.profiler.profile")
        prof.function_events = EventList([])
        return prof

    patch(legacy, "__enter__", guarded_enter)
    patch(legacy, "__exit__", lambda prof, *exc: legacy_exit(prof, *exc) if own(prof) else False)
    nvtx = torch.autograd.profiler.emit_nvtx

    def nvtx_enter(ctx):
        if getattr(ctx, "enabled", True):
            note("emit_nvtx")
        return ctx

    patch(nvtx, "__enter__", nvtx_enter)
    patch(nvtx, "__exit__", lambda ctx, *exc: False)
