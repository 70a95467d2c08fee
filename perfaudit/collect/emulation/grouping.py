"""torch groups tensors by their device in C++ (`_group_tensors_by_device_and_dtype`), which sees the emulated
device's tensors where they really are, on the CPU. `clip_grad_norm_` then moved its clip coefficient to that
"cpu", a device-to-host read a GPU never makes, every step. Its groups of device tensors are keyed by the
emulated device, as on a GPU."""
from __future__ import annotations

import torch.nn.utils.clip_grad as clip_grad

from ..wrap import patch
from .placement import CUDA


def group_on_the_emulated_device(mode) -> None:
    original = clip_grad._group_tensors_by_device_and_dtype

    def grouped(tensorlistlist, with_indices=False):
        groups = original(tensorlistlist, with_indices)
        if mode.aside:
            return groups
        out = {}
        for (device, dtype), value in groups.items():
            tensors = value[0][0] if value and value[0] else []
            on_device = device.type == "cpu" and tensors and all(mode.on_device.has(t) for t in tensors)
            out[(CUDA if on_device else device, dtype)] = value
        return out

    patch(clip_grad, "_group_tensors_by_device_and_dtype", grouped)
