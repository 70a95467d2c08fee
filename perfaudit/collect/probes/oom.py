"""What held the GPU's memory when the script ran out of it: the caching allocator's snapshot at the OOM.

On a real GPU the allocator keeps the Python stack of every live block ("state" history: no event list, one
captured stack an allocation) from the moment CUDA starts, and an out-of-memory observer (torch's documented
way to snapshot at an OOM) sums the live blocks by the user's line that allocated them and by what they are
(parameters, gradients, optimizer state; the rest activations, batches and temporaries) before the exception
unwinds the script. A script that records its own history keeps it: its stacks are read just the same.

The history is off from the end of the warm-up steps (the GPU memory probe's two steps of "all" end it, or
`pause`): capturing a stack an allocation made host-bound steps 10-30 % slower on an H200 (char_transformer.py
4.8-5.3 ms -> 6.6-6.8, device_built_lm.py +22 %, cnn_classifier.py +10 %), which the measured steps must not
pay. Most OOMs come in the first steps (the first forward, backward and optimizer step set the peak); one in a
measured step still gets the totals, the categories and the lines of the blocks allocated before it.
"""
from __future__ import annotations

import torch

from ..internal import record_internal_error
from ..userframes import is_user_file

TOP_SITES = 10


def block_categories(optimizers) -> dict[int, str]:
    """Block addresses -> what they hold (parameters, gradients, optimizer state), from the live optimizers; an
    earlier kind is never overridden by a later (a parameter's block stays a parameter's)."""
    out: dict[int, str] = {}

    def note(t, category: str) -> None:
        if isinstance(t, torch.Tensor) and t.is_cuda:
            out.setdefault(t.untyped_storage().data_ptr(), category)
    optimizers = [o for o in optimizers if o is not None]
    for opt in optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                note(p, "parameters")
    for opt in optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                note(p.grad, "gradients")
    for opt in optimizers:
        for state in opt.state.values():
            for value in state.values() if isinstance(state, dict) else ():
                note(value, "optimizer state")
    return out


def live_blocks_at_oom(snapshot: dict, device: int, categories: dict[int, str]) -> dict:
    """The allocator's snapshot summed: bytes allocated and reserved on `device`, the live blocks by category
    and by the user's line that allocated them (innermost user frame of the block's stack), and the bytes no
    user line is known for (allocated before the history was on, or by a library: cuBLAS's workspace)."""
    allocated = reserved = unattributed = 0
    by_category: dict[str, int] = {}
    sites: dict[tuple, dict] = {}
    for segment in _list(snapshot.get("segments")):
        if not isinstance(segment, dict) or segment.get("device", device) != device:
            continue
        reserved += _int(segment.get("total_size"))
        for block in _list(segment.get("blocks")):
            if not isinstance(block, dict) or block.get("state") != "active_allocated":
                continue
            size = _int(block.get("size"))
            allocated += size
            address = block.get("address")
            category = (categories.get(address) if isinstance(address, int) else None) or "other"
            by_category[category] = by_category.get(category, 0) + size
            frame = next((f for f in _list(block.get("frames")) if isinstance(f, dict)
                          and is_user_file(f.get("filename"))), None)
            line = frame.get("line") if frame else None
            if frame is None or not isinstance(line, int) or isinstance(line, bool) or line < 1:
                unattributed += size
                continue
            site = sites.setdefault((frame["filename"], line), {
                "path": frame["filename"], "line": line, "bytes": 0, "blocks": 0, "categories": {}})
            site["bytes"] += size
            site["blocks"] += 1
            site["categories"][category] = site["categories"].get(category, 0) + size
    return {"allocated_bytes": allocated, "reserved_bytes": reserved, "unattributed_bytes": unattributed,
            "by_category": dict(sorted(((k, v) for k, v in by_category.items() if v), key=lambda kv: -kv[1])),
            "top_sites": sorted(sites.values(), key=lambda s: -s["bytes"])[:TOP_SITES]}


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _int(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def history_on() -> bool:
    """Whether the caching allocator is recording its history (this watch's, or the script's own)."""
    probe = getattr(torch._C, "_cuda_isHistoryEnabled", None)
    try:
        return bool(probe()) if probe is not None else False
    except Exception:  # noqa: BLE001 - unknown: taken as off
        return False


def is_out_of_memory(result: dict) -> bool:
    """Whether the script's end (child.py's record of it) was a CUDA out-of-memory error."""
    return result.get("exception") == "OutOfMemoryError" or "CUDA out of memory" in str(result.get("message"))


class OomWatch:
    """install() before the script runs; attach(result) adds the snapshot to the script's end if it ran out."""

    def __init__(self, optimizers, scripts_history=lambda: False) -> None:
        self._optimizers = optimizers  # () -> the live optimizers
        self.scripts_history = scripts_history  # () -> whether the script turned the history on (memory_history.py)
        self.keeps_history = False     # this watch turned the "state" history on (the script's own is left alone)
        self.paused = False            # ... and turned it off at the end of the warm-up steps
        self.ooms = 0
        self.at_oom: dict | None = None

    def install(self) -> None:
        # at CUDA's lazy initialisation (now, if it has run): a script that never touches the GPU starts no context
        torch.cuda._lazy_call(self._on_cuda_start)

    def _on_cuda_start(self) -> None:
        try:
            attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
            if attach is None:  # an older torch: the OOM is reported without the lines
                return
            attach(self._observed)
            if not history_on():
                torch.cuda.memory._record_memory_history(enabled="state", context="alloc", stacks="python")
                self.keeps_history = True
        except Exception as exc:  # noqa: BLE001 - the script runs on without the snapshot
            record_internal_error("OOM watch", exc)

    def pause(self) -> None:
        """At the end of the warm-up steps: this watch's history off (the script's own is left alone)."""
        if not self.keeps_history or self.paused:
            return
        self.paused = True
        try:
            if history_on() and not self.scripts_history():  # the script's own recording goes on
                torch.cuda.memory._record_memory_history(enabled=None)
        except Exception as exc:  # noqa: BLE001
            record_internal_error("OOM watch", exc)

    def _observed(self, device: int, requested: int, limit: int, free: int) -> None:
        """torch's OOM observer, called before the OutOfMemoryError is raised, with the allocator's lock free."""
        self.ooms += 1
        try:
            summary = live_blocks_at_oom(torch.cuda.memory._snapshot(), device, block_categories(self._optimizers()))
            total = torch.cuda.get_device_properties(device).total_memory
            self.at_oom = {**summary, "requested_bytes": int(requested), "device_free_bytes": int(free),
                           "device_total_bytes": int(total), "ooms_seen": self.ooms,
                           "lines_recorded": "until the measured steps" if self.paused else history_on()}
        except Exception as exc:  # noqa: BLE001 - the error is the script's; the report says it without lines
            record_internal_error("OOM watch", exc)

    def attach(self, result: dict) -> None:
        if self.at_oom is not None and is_out_of_memory(result):
            result["oom"] = self.at_oom

    def snapshot(self) -> dict:
        return {"ooms_seen": self.ooms, "history": "paused" if self.paused else self.keeps_history or history_on()}
