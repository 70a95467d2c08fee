"""The torch calls by which the host reads a device value, each a wait for the device (tip T01): the
emulated device records each at the user's line where a GPU's host would wait (placement.py)."""
from __future__ import annotations

import torch

Tensor = torch.Tensor

# the host's reads of a tensor's value
READS = {Tensor.item: ".item()", Tensor.tolist: ".tolist()", Tensor.__bool__: "bool(tensor)",
         Tensor.__int__: "int(tensor)", Tensor.__float__: "float(tensor)", Tensor.__index__: "index(tensor)",
         Tensor.__format__: "format(tensor)", Tensor.__repr__: "print(tensor)", Tensor.numpy: ".numpy()",
         Tensor.nonzero: ".nonzero()", torch.nonzero: "torch.nonzero", torch.masked_select: "masked_select",
         Tensor.masked_select: ".masked_select()"}
# torch calls whose kernel reads a device argument on the host, on every device: (what, its position, keyword,
# reads per call). torch.normal checks that a tensor std is >= 0 (`std.min().ge(0).item()`) twice, in the op and
# in its kernel's template (torch 2.11 on an H200, 2.13 on the CPU); Normal.sample calls it every step
KERNEL_READS = {torch.normal: ("torch.normal(std=tensor)", 1, "std", 2)}
