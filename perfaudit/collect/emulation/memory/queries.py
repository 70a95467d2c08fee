"""The memory queries a script makes on the emulated device (`torch.cuda.max_memory_allocated()` logged each
epoch, a guard before growing a batch), answered as the GPU would: a GPU never answers 0, and its peak holds
the training step's activations and temporaries, which are gone by the time a script asks.

The current figures are the bytes of the tensors the script holds on the device, with the cuBLAS workspaces
once a product ran there; the peak since the last reset is the highest figure seen at a query, or, once a
training step ended since the reset, the peak of the steps the device memory was tracked over
(device_memory.py: training steps repeat, so each reaches it).
"""
from __future__ import annotations

from .caching_allocator import CUDA_CONTEXT_BYTES, cublas_workspace_bytes

SEGMENT = 2 << 20  # the caching allocator's small-pool segment: what it reserves at least


def _reserved_for(nbytes: int) -> int:
    return -(-max(nbytes, 1) // SEGMENT) * SEGMENT


class MemoryQueries:
    """`recorder`: the placement mode (what is on the device, the step clock, the tracked steps' memory);
    `total`: the device's memory; `capability`: its compute capability (the cuBLAS workspace's size)."""

    def __init__(self, recorder, total: int, capability: float):
        self.recorder, self.total, self.capability = recorder, total, capability
        self.peak = 0
        self.peak_reserved = 0
        self.reset_at = 0  # the step clock at the last reset of the peaks

    def _tracked(self):
        return getattr(self.recorder, "tracked_memory", None)

    def _workspaces(self) -> int:
        tracked = self._tracked()
        return len(tracked.cublas_passes) * cublas_workspace_bytes(self.capability) if tracked is not None else 0

    def _step_peak(self) -> int:
        """The tracked training steps' peak, when a step ended since the peaks were reset; else 0."""
        tracked = self._tracked()
        if tracked is None or self.recorder.step_clock() <= self.reset_at:
            return 0
        peak = tracked.step_peak()
        return peak + self._workspaces() if peak is not None else 0

    def allocated(self, device=None) -> int:
        now = self.recorder.on_device.nbytes() + self._workspaces()
        self.peak = max(self.peak, now)
        return now

    def reserved(self, device=None) -> int:
        now = _reserved_for(self.allocated())
        self.peak_reserved = max(self.peak_reserved, now)
        return now

    def max_allocated(self, device=None) -> int:
        self.allocated()
        return max(self.peak, self._step_peak())

    def max_reserved(self, device=None) -> int:
        self.reserved()
        return max(self.peak_reserved, _reserved_for(self._step_peak()))

    def reset_peak(self, device=None) -> None:
        self.peak, self.peak_reserved = 0, 0
        self.reset_at = self.recorder.step_clock()
        self.reserved()

    def stats(self, device=None) -> dict:
        allocated, reserved = self.allocated(), self.reserved()
        peak, peak_reserved = self.max_allocated(), self.max_reserved()
        out = {"num_alloc_retries": 0, "num_ooms": 0, "num_device_alloc": 0, "num_device_free": 0}
        for key, now, top in (("allocated_bytes", allocated, peak), ("reserved_bytes", reserved, peak_reserved),
                              ("active_bytes", allocated, peak), ("requested_bytes", allocated, peak)):
            for pool in ("all", "small_pool", "large_pool"):
                share = 1 if pool != "small_pool" else 0
                for stat, value in (("current", now), ("peak", top), ("allocated", top), ("freed", 0)):
                    out[f"{key}.{pool}.{stat}"] = value * share
        return out

    def summary(self, device=None, abbreviated: bool = False) -> str:
        return (f"CUDA memory (emulated on the CPU by perfaudit): {self.allocated() / 2**20:.1f} MiB allocated, "
                f"{self.reserved() / 2**20:.1f} MiB reserved, peak {self.max_allocated() / 2**20:.1f} MiB")

    def free_and_total(self, device=None) -> tuple[int, int]:
        """What `torch.cuda.mem_get_info()` gives on a GPU: free is the total less what torch's pool reserved
        and what the CUDA context and the libraries hold outside it (a script sizing its batch by it)."""
        return max(self.total - self.reserved() - CUDA_CONTEXT_BYTES, 0), self.total
