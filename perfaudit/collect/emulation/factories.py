"""The torch calls that make a tensor: on the host unless told a device (placement.py notes where the user's
code made one, the COPY002 pattern when it then moves, and a host operand a GPU refuses: moves/same_device.py)."""
from __future__ import annotations

import torch

from ...calls import CREATION

Tensor = torch.Tensor

# calls that build a tensor from host data: with device="cuda" they copy that data over (pageable)
FROM_DATA = {torch.tensor, torch.as_tensor, torch.asarray, Tensor.new_tensor}
# calls that make a new host tensor from nothing on the device (the COPY002 pattern when moved after): the factories
# the static pass and the fixes know by name (calls.CREATION), and two that take `device=` too. Not torch.from_numpy
# (host data, no `device=`: its move is COPY001's, and it reaches no TorchFunctionMode). Not the `*_like`,
# `Tensor.new_*`, bernoulli and multinomial calls: they take their source's device, and a source the device never saw
# made (a torch.func transform's or a TorchScript function's output) is no sign of the host; a known host source
# (made here, a batch) makes its result so too, through the mode's record of what came of what.
FACTORIES = {getattr(torch, name) for name in CREATION if hasattr(torch, name)} | {torch.asarray, Tensor.new_tensor}
