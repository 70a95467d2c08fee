"""Recurrent layers (nn.LSTM, nn.GRU, nn.RNN) of a model made 16-bit, or in a CUDA autocast region, on a CPU whose
16-bit products are slow (half_math.slow_half).

A GPU runs them in cuDNN in the 16-bit type; the CPU's own 16-bit kernels made a `.half()` 2-layer LSTM language
model's step 30x its CPU branch's. The layer reaches the device's mode as one call (`_VF.lstm`, its hidden state
and weights in lists): here it is computed in float32 once, its graph kept for backward (a recurrence computed
twice would double the layer's time), its outputs and gradients in the 16-bit type. What the float32 graph saves
is the CPU's, not the device's; the device holds, until backward, what the layer saves in 16 bits (a cuDNN
layer's reserve is of that order), counted from what that graph saved: an estimate, said as such in the
docs (docs/performance.md)."""
from __future__ import annotations

import torch
from torch import Tensor

from .half_math import _flatten, cpu_autocast_type, kept_in_float32, slow_half_type

RNN_FUNCTIONS = tuple(getattr(torch._VF, name) for name in ("lstm", "gru", "rnn_tanh", "rnn_relu")
                      if hasattr(torch._VF, name))


def half_rnn_handler(mode):
    """The mode's handler for RNN_FUNCTIONS: on device tensors in a 16-bit type (the model's, or an enabled
    autocast region's) this CPU is slow at, KeptInFloat32; every other call takes the mode's own path."""
    def handle(func, args, kwargs):
        first = args[0] if args else None
        if kwargs or not isinstance(first, Tensor) or not first.is_floating_point():
            return mode.DEFAULT
        tensors = [t for t in _flatten(args)[0] if isinstance(t, Tensor)]
        dtype, region = slow_half_type(first), cpu_autocast_type()
        floats = [t for t in tensors if t.is_floating_point()]
        if dtype is None or not any(mode.on_device.has(t) for t in tensors) or any(
                t.dtype == torch.float64 or (region is None and t.dtype != dtype) for t in floats):
            return mode.DEFAULT  # float32 math, host tensors, types the call itself refuses
        outs = kept_in_float32(func, list(args), dtype, mode, reserve=True)
        mode.device_ops += 1
        for t in outs:
            mode.on_device.add(t)
        return outs
    return handle
