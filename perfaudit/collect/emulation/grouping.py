"""torch groups tensors by their device in C++ (`_group_tensors_by_device_and_dtype`), which sees the emulated
device's tensors where they really are, on the CPU. `clip_grad_norm_` then moved its clip coefficient to that
"cpu" (a blocking device-to-host read a GPU never makes, every step), and a fused optimizer the GradScaler's
scale and inf flag (two non-blocking ones). Groups of device tensors are keyed by the emulated device, as on a
GPU, where torch's clipping and its optimizers group them."""
from __future__ import annotations

import torch.nn.utils.clip_grad as clip_grad
import torch.optim.optimizer as optimizer

from ..wrap import patch
from .placement import CUDA


def group_on_the_emulated_device(mode) -> None:
    for module in (clip_grad, optimizer):
        original = getattr(module, "_group_tensors_by_device_and_dtype", None)
        if original is not None:
            patch(module, "_group_tensors_by_device_and_dtype", _keyed_by_the_emulated_device(mode, original))


def _keyed_by_the_emulated_device(mode, original):
    def grouped(tensorlistlist, with_indices=False):
        groups = original(tensorlistlist, with_indices)
        if mode.aside:
            return groups
        out = {}
        for (device, dtype), value in groups.items():
            tensors = value[0][0] if value and value[0] else []
            on_device = getattr(device, "type", None) == "cpu" and tensors and all(mode.on_device.has(t) for t in tensors)
            out[(CUDA if on_device else device, dtype)] = value
        return out
    return grouped
