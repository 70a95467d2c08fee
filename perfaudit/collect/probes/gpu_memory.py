"""Device memory on a real GPU over the same two warm-up steps the emulated device tracks: torch's counters.

The peaks and what held memory at the peak come from the caching allocator's history
(`torch.cuda.memory._record_memory_history`, Python stacks only, for those two steps): its allocations and frees
(and segments, for the reserved peak) are replayed from the bytes held at the start, so torch's own peak counters
are never reset (a script logging `max_memory_allocated()` still reads its own peak), and a script recording its
own history keeps it (perfaudit then reads the peaks only: torch's counters since the script's start or its last
reset, said so). Only a torch without the history resets the counters. The blocks live at the peak are summed
by the user's line that allocated them and by what they are (parameters, gradients and optimizer state by their
addresses at the end, activations by the addresses autograd saved for backward, cuBLAS's workspaces by their
sizes; the rest `other`: batches, temporaries, cuDNN's workspaces). Blocks from before the two steps are located
by the OOM watch's stacks (oom.py). What the process holds on the GPU beyond torch's pool (the CUDA context,
libraries) is the device's used memory less torch's reserved memory.
"""
from __future__ import annotations

from contextlib import AbstractContextManager

import torch

from ..emulation.memory.caching_allocator import cublas_workspace_bytes, cublaslt_workspace_bytes
from ..emulation.memory.saved_tensors import saved_tensors_watch
from ..internal import record_internal_error
from ..userframes import is_user_file
from .oom import OomWatch, block_categories, history_on

MAX_ENTRIES = 200_000  # allocator events kept (two steps of a large model: tens of thousands)


def peak_of_history(trace: list, start_allocated: int, categories: dict[int, str],
                    baseline_blocks: dict[int, int], baseline_frames: dict[int, list] | None = None) -> dict:
    """Replay an allocator history (one device's `device_traces`): the bytes allocated at their peak, the
    blocks live then by category and by the user's line that allocated them. `start_allocated`: the bytes
    allocated when recording began (those blocks are in no `alloc` entry); `baseline_blocks`: the ones of them
    still allocated at the end (address -> size), which can be named by `categories` (address -> category) and
    located by `baseline_frames` (address -> the stack the OOM watch's "state" history kept for it)."""
    now = peak = start_allocated
    peak_at = -1
    for i, entry in enumerate(trace):
        action = entry.get("action")
        if action == "alloc":
            now += int(entry.get("size") or 0)
        elif action == "free_requested":
            now -= int(entry.get("size") or 0)
        if now >= peak:  # the last time it is reached, as the emulated device counts it
            peak, peak_at = now, i
    live: dict[int, tuple[int, list]] = {}
    freed_baseline = 0
    for entry in trace[:peak_at + 1]:
        action, addr = entry.get("action"), entry.get("addr")
        if action == "alloc":
            live[addr] = (int(entry.get("size") or 0), entry.get("frames") or [])
        elif action == "free_requested":
            if live.pop(addr, None) is None:
                freed_baseline += int(entry.get("size") or 0)
    by_category: dict[str, int] = {}
    sites: dict[tuple, dict] = {}
    for addr, (size, frames) in live.items():
        category = categories.get(addr) or "other"
        by_category[category] = by_category.get(category, 0) + size
        _add_site(sites, frames, size, category)
    for addr, frames in (baseline_frames or {}).items():  # never freed in the steps: live at their peak
        if addr in baseline_blocks:
            _add_site(sites, frames, baseline_blocks[addr], categories.get(addr) or "other")
    baseline = max(start_allocated - freed_baseline, 0)
    named = 0
    for addr, size in baseline_blocks.items():  # the step's starting blocks that stayed: the model, its state
        kind = categories.get(addr)
        if kind and named + size <= baseline:
            by_category[kind] = by_category.get(kind, 0) + size
            named += size
    if baseline - named > 0:
        by_category["other"] = by_category.get("other", 0) + baseline - named
    return {"peak_allocated_bytes": peak, "start_bytes": start_allocated, "reserved_growth_bytes": _segment_peak(trace),
            "by_category": {k: v for k, v in sorted(by_category.items(), key=lambda kv: -kv[1]) if v},
            "top_sites": sorted(sites.values(), key=lambda s: -s["bytes"])[:10],
            "allocations": sum(1 for e in trace if e.get("action") == "alloc")}


def _library_workspaces(blocks: list[dict], categories: dict[int, str], device: int) -> set[int]:
    """The blocks from before the steps that are cuBLAS's workspaces, not the script's tensors: of the size
    torch gives one on this GPU (one a thread that ran a matrix product), and cuBLASLt's beside the first,
    allocated by the same call (caching_allocator.py says the sizes)."""
    major, minor = torch.cuda.get_device_capability(device)
    capability = major + minor / 10
    size, lt = cublas_workspace_bytes(capability), cublaslt_workspace_bytes(capability)
    found = {b["address"] for b in blocks if size and b.get("size") == size and b["address"] not in categories}
    stacks = [b.get("frames") for b in blocks if b["address"] in found]
    return found | {b["address"] for b in blocks if lt and b.get("size") == lt and b["address"] not in categories
                    and b.get("frames") and b.get("frames") in stacks}


def _add_site(sites: dict[tuple, dict], frames: list, size: int, category: str) -> None:
    """A live block counted at the user's line that allocated it (its innermost user frame), if it has one."""
    frame = next((f for f in frames if isinstance(f, dict) and is_user_file(f.get("filename"))), None)
    if frame is None or not isinstance(frame.get("line"), int) or frame["line"] < 1:
        return
    site = sites.setdefault((frame["filename"], frame["line"]), {
        "path": frame["filename"], "line": frame["line"], "bytes": 0, "categories": {}})
    site["bytes"] += size
    site["categories"][category] = site["categories"].get(category, 0) + size


_SEGMENT_GROWS = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}


def _segment_peak(trace: list) -> int:
    """How far the allocator's reserved bytes rose above where they were when recording began (segments
    allocated or mapped, less those freed or unmapped), at their highest."""
    now = peak = 0
    for entry in trace:
        sign = _SEGMENT_GROWS.get(entry.get("action"))
        if sign:
            now += sign * int(entry.get("size") or 0)
            peak = max(peak, now)
    return peak


class GpuMemory:
    """start() and stop() around the two warm-up steps; snapshot() gives what was measured (or None)."""

    def __init__(self, optimizers, oom: OomWatch | None = None) -> None:
        self._optimizers = optimizers  # () -> the live optimizers (their params, grads and state)
        self._oom = oom                # the OOM watch, whose "state" history these steps turn to "all", then off
        self._device: int | None = None
        self._start = 0
        self._start_reserved = 0
        self._history = False
        self._reset = False            # torch's peak counters were reset (a torch without the history)
        self._scripts_history = False  # the script records the allocator's history itself: left alone
        self._saved: set[int] = set()
        self._hooks: AbstractContextManager | None = None
        self.result: dict | None = None

    def start(self) -> None:
        if self._device is not None or self.result is not None or not torch.cuda.is_initialized():
            return
        try:
            self._device = torch.cuda.current_device()
            torch.cuda.synchronize()
            self._start, self._start_reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
            self._scripts_history = history_on() and (self._oom is None or not self._oom.keeps_history
                                                      or self._oom.scripts_history())
            if not self._scripts_history:
                try:
                    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                             max_entries=MAX_ENTRIES)
                    self._history = True
                except (TypeError, RuntimeError, AttributeError):  # an older torch: the peaks alone, after a reset
                    torch.cuda.reset_peak_memory_stats()
                    self._reset = True
            self._hooks = saved_tensors_watch(self._packed)
            self._hooks.__enter__()
        except Exception as exc:  # noqa: BLE001 - the run goes on without the memory figures
            record_internal_error("gpu memory", exc)
            self._device = None

    def _packed(self, t):
        if t.is_cuda:
            self._saved.add(t.untyped_storage().data_ptr())
        return t

    def stop(self) -> None:
        if self._device is None or self.result is not None:
            return
        try:
            if self._hooks is not None:
                self._hooks.__exit__(None, None, None)
            torch.cuda.synchronize()
            peak_allocated, peak_reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
            snapshot = torch.cuda.memory._snapshot() if self._history else None
            if self._history:
                torch.cuda.memory._record_memory_history(enabled=None)  # the OOM watch's "state" too: see oom.py
            free, total = torch.cuda.mem_get_info()
            outside = max(total - free - torch.cuda.memory_reserved(), 0)
            replay = self._replay(snapshot, self._device) if snapshot else {"by_category": {}, "top_sites": []}
            peaks = {"peak_allocated_bytes": peak_allocated, "peak_reserved_bytes": peak_reserved}
            if "peak_allocated_bytes" in replay:  # the steps' own peaks, torch's counters untouched
                peaks = {"peak_allocated_bytes": replay["peak_allocated_bytes"],
                         "peak_reserved_bytes": self._start_reserved + replay.pop("reserved_growth_bytes", 0)}
            elif not self._reset:  # torch's counters cover more than these steps: said so
                replay["peak_scope"] = ("the script's own allocator history is on (left as it was): the peaks are "
                                        "torch's since the script's start or its last reset" if self._scripts_history
                                        else "the allocator history was cut: the peaks are torch's since the "
                                        "script's start or its last reset")
            self.result = {**replay, **peaks, "measured": True, "device_total_bytes": total,
                           "outside_pool_bytes": outside}
        except Exception as exc:  # noqa: BLE001
            record_internal_error("gpu memory", exc)
        finally:
            self._device = None

    def _replay(self, snapshot: dict, device: int) -> dict:
        traces = snapshot.get("device_traces") or []
        trace = traces[device] if device < len(traces) else []
        if len(trace) >= MAX_ENTRIES:  # the oldest events were dropped: the replay would start mid-way
            return {"by_category": {}, "top_sites": [], "history": f"over {MAX_ENTRIES} allocator events"}
        traced = {e.get("addr") for e in trace if e.get("action") == "alloc"}
        blocks = [b for seg in snapshot.get("segments") or [] if seg.get("device") == device
                  for b in seg.get("blocks") or [] if b.get("state") == "active_allocated" and b["address"] not in traced]
        categories = self._categories()
        workspaces = _library_workspaces(blocks, categories, device)
        categories.update(dict.fromkeys(workspaces, "cuBLAS workspace"))
        frames = {b["address"]: b["frames"] for b in blocks  # the OOM watch's stacks; a workspace is no line's
                  if b.get("frames") and b["address"] not in workspaces}
        return peak_of_history(trace, self._start, categories, {b["address"]: b["size"] for b in blocks}, frames)

    def _categories(self) -> dict[int, str]:
        """Block addresses -> what they hold, as found at the end of the steps (a parameter's block is a
        parameter's even when autograd saved it)."""
        out = block_categories(self._optimizers())
        for addr in self._saved:
            out.setdefault(addr, "activations")
        return out

    def snapshot(self) -> dict | None:
        return self.result
