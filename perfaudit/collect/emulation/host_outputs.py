"""torch calls that, given device tensors, return one of their results on the host, as on a GPU.

Everything else an op on a device tensor returns lives on the device (placement.py). The packed-sequence
kernels are the exception: `pack_padded_sequence` keeps the batch sizes on the CPU (PackedSequence refuses
any other: "batch_sizes should always be on CPU"), and `pad_packed_sequence` returns the lengths there. Their
lengths must be given on the CPU: lengths moved to the device with the batch raise on a GPU (PackedSequence.cpp's
check, pytorch/pytorch#43227), and so here."""
from __future__ import annotations

import torch

from .cuda_shim import gpu_error
from .tensor_registry import tag

# the kernel -> the positions of its results that stay on the host
_PACK = torch._VF._pack_padded_sequence
_HOST_RESULTS = {_PACK: (1,), torch._VF._pad_packed_sequence: (1,)}


def host_output_handlers(placement) -> dict:
    """The mode's handlers for these kernels: the device results tagged, the host ones left alone."""
    def run(func, args, kwargs):
        lengths = (args[1] if len(args) > 1 else kwargs.get("lengths")) if func is _PACK else None
        if isinstance(lengths, torch.Tensor) and placement.on_device.has(lengths):
            kind = lengths.type().rsplit(".", 1)[-1].replace("Tensor", "")  # torch.LongTensor -> Long
            raise gpu_error(f"'lengths' argument should be a 1D CPU int64 tensor, but got {lengths.dim()}D cuda:0 "
                            f"{kind} tensor")
        out = func(*args, **kwargs)
        if any(isinstance(a, torch.Tensor) and placement.on_device.has(a) for a in args):
            placement.device_ops += 1
            host = _HOST_RESULTS[func]
            tag([t for i, t in enumerate(out) if i not in host], placement.on_device)
        return out
    return {func: run for func in _HOST_RESULTS}
