"""The torch calls that make a tensor: on the host unless told a device (placement.py notes where the user's
code made one, the COPY002 pattern when it then moves, and a host operand a GPU refuses: same_device.py)."""
from __future__ import annotations

import torch

Tensor = torch.Tensor

# calls that build a tensor from host data: with device="cuda" they copy that data over (pageable)
FROM_DATA = {torch.tensor, torch.as_tensor, torch.asarray, Tensor.new_tensor}
# calls that make a new host tensor from nothing on the device (the COPY002 pattern when moved after)
FACTORIES = {torch.randn, torch.rand, torch.randint, torch.randperm, torch.zeros, torch.ones, torch.full, torch.empty,
             torch.arange, torch.linspace, torch.logspace, torch.eye, torch.tensor, torch.as_tensor, torch.asarray,
             torch.from_numpy, torch.normal, torch.bernoulli, torch.multinomial, torch.randn_like, torch.rand_like,
             torch.zeros_like, torch.ones_like, torch.full_like, torch.empty_like, torch.randint_like,
             Tensor.new_tensor, Tensor.new_zeros, Tensor.new_ones, Tensor.new_full, Tensor.new_empty,
             torch.hann_window, torch.hamming_window, torch.blackman_window, torch.bartlett_window,
             torch.kaiser_window, torch.tril_indices, torch.triu_indices}
