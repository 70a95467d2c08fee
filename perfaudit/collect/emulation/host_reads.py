"""The torch calls by which the host reads a device value, each a wait for the device (tip T01): the
emulated device records each at the user's line where a GPU's host would wait (placement.py)."""
from __future__ import annotations

from collections.abc import Callable

import torch

Tensor = torch.Tensor

# the host's reads of a tensor's value
READS = {Tensor.item: ".item()", Tensor.tolist: ".tolist()", Tensor.__bool__: "bool(tensor)",
         Tensor.__int__: "int(tensor)", Tensor.__float__: "float(tensor)", Tensor.__index__: "index(tensor)",
         Tensor.__format__: "format(tensor)", Tensor.__repr__: "print(tensor)", Tensor.numpy: ".numpy()",
         Tensor.nonzero: ".nonzero()", torch.nonzero: "torch.nonzero", torch.masked_select: "masked_select",
         Tensor.masked_select: ".masked_select()", Tensor.__array__: "np.asarray(tensor)"}

# reads a GPU refuses (a device tensor has no host memory for numpy to share): (the error, its type)
_NO_NUMPY = ("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory "
             "first.", TypeError)
REFUSED: dict[Callable, tuple[str, type]] = {Tensor.numpy: _NO_NUMPY, Tensor.__array__: _NO_NUMPY}


def _one_hot_reads(args, kwargs) -> int:
    """F.one_hot reads the largest class on a GPU when it is not told how many there are (ATen's Onehot.cpp:
    `self.max().item()`); given `num_classes`, CUDA leaves the check to scatter's device asserts."""
    classes = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
    return 1 if classes == -1 else 0


def _bincount_reads(args, kwargs) -> int:
    """CUDA's bincount reads the smallest value (a negative one is an error; not for uint8) and the largest (the
    output's size) back to the host (ATen's SummaryOps.cu)."""
    first = args[0] if args else kwargs.get("input")
    return 1 if isinstance(first, Tensor) and first.dtype == torch.uint8 else 2


def _one_argument_where(args, kwargs) -> int:
    """torch.where(condition) is nonzero: the output's size needs the device."""
    return 1 if len(args) + len(kwargs) == 1 else 0


def _without_output_size(args, kwargs) -> int:
    """repeat_interleave with a tensor of repeats sums them on the host unless `output_size` says it."""
    repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
    return 1 if isinstance(repeats, Tensor) and repeats.numel() > 1 and kwargs.get("output_size") is None else 0


# torch calls whose kernel reads a device argument on the host: (what, its position, keyword, reads per call: a
# number or a function of the call's arguments). torch.normal checks that a tensor std is >= 0
# (`std.min().ge(0).item()`) twice, in the op and in its kernel's template (torch 2.11 on an H200, 2.13 on the
# CPU); Normal.sample calls it every step. The others size their output from the device's values on a GPU.
_UNIQUE = "torch.unique (the output's size needs the device)"
KERNEL_READS: dict[Callable, tuple[str, int, str, int | Callable[[tuple, dict], int]]] = {
    torch.normal: ("torch.normal(std=tensor)", 1, "std", 2),
    torch._C._nn.one_hot: ("F.one_hot without num_classes (reads the largest class)", 0, "input", _one_hot_reads),
    torch.bincount: ("torch.bincount (reads the smallest and largest value)", 0, "input", _bincount_reads),
    Tensor.bincount: ("torch.bincount (reads the smallest and largest value)", 0, "input", _bincount_reads),
    torch.unique: (_UNIQUE, 0, "input", 1), Tensor.unique: (_UNIQUE, 0, "input", 1),
    torch.unique_consecutive: (_UNIQUE, 0, "input", 1), Tensor.unique_consecutive: (_UNIQUE, 0, "input", 1),
    torch.where: ("torch.where(condition) (nonzero: the output's size needs the device)", 0, "condition",
                  _one_argument_where),
    torch.argwhere: ("torch.argwhere (nonzero: the output's size needs the device)", 0, "input", 1),
    Tensor.argwhere: ("torch.argwhere (nonzero: the output's size needs the device)", 0, "input", 1),
    torch.repeat_interleave: ("repeat_interleave without output_size (sums the repeats on the host)", 0, "input",
                              _without_output_size),
    Tensor.repeat_interleave: ("repeat_interleave without output_size (sums the repeats on the host)", 0, "input",
                               _without_output_size),
}
