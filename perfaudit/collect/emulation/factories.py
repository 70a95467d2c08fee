"""The torch calls that make a tensor: on the host unless told a device (placement.py notes where the user's
code made one, the COPY002 pattern when it then moves, and a host operand a GPU refuses: same_device.py)."""
from __future__ import annotations

import functools

import torch

from ..wrap import patch

Tensor = torch.Tensor

# calls that build a tensor from host data: with device="cuda" they copy that data over (pageable)
FROM_DATA = {torch.tensor, torch.as_tensor, torch.asarray, Tensor.new_tensor}
# calls that make a new host tensor from nothing on the device (the COPY002 pattern when moved after). Not the
# `*_like`, `Tensor.new_*`, bernoulli and multinomial calls: they take their source's device, and a source the
# device never saw made (a torch.func transform's or a TorchScript function's output) is no sign of the host; a
# known host source (made here, a batch) makes its result so too, through the mode's record of what came of what.
FACTORIES = {torch.randn, torch.rand, torch.randint, torch.randperm, torch.zeros, torch.ones, torch.full, torch.empty,
             torch.arange, torch.linspace, torch.logspace, torch.eye, torch.tensor, torch.as_tensor, torch.asarray,
             torch.from_numpy, torch.normal, Tensor.new_tensor, torch.hann_window, torch.hamming_window,
             torch.blackman_window, torch.bartlett_window, torch.kaiser_window, torch.tril_indices, torch.triu_indices}


def follow_from_numpy(mode) -> None:
    """torch.from_numpy reaches no TorchFunctionMode: wrapped, what it makes is noted as made on the host at the
    user's line, as the mode notes the other factories' (a batch made from a NumPy array in the step and moved
    is the COPY002 pattern, as the CPU run finds it)."""
    original = torch.from_numpy

    @functools.wraps(original)
    def from_numpy(array):
        out = original(array)
        if not mode.aside:
            mode._host_made(out)  # its frames: _host_made, this wrapper, the caller
        return out

    patch(torch, "from_numpy", from_numpy)
