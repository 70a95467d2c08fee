"""torch calls that, given device tensors, return one of their results on the host, as on a GPU.

Everything else an op on a device tensor returns lives on the device (placement.py). The packed-sequence
kernels are the exception: `pack_padded_sequence` keeps the batch sizes on the CPU (PackedSequence refuses
any other: "batch_sizes should always be on CPU"), and `pad_packed_sequence` returns the lengths there."""
from __future__ import annotations

import torch

from .tensor_registry import tag

# the kernel -> the positions of its results that stay on the host
_HOST_RESULTS = {torch._VF._pack_padded_sequence: (1,), torch._VF._pad_packed_sequence: (1,)}


def host_output_handlers(placement) -> dict:
    """The mode's handlers for these kernels: the device results tagged, the host ones left alone."""
    def run(func, args, kwargs):
        out = func(*args, **kwargs)
        if any(isinstance(a, torch.Tensor) and placement.on_device.has(a) for a in args):
            placement.device_ops += 1
            host = _HOST_RESULTS[func]
            tag([t for i, t in enumerate(out) if i not in host], placement.on_device)
        return out
    return {func: run for func in _HOST_RESULTS}
