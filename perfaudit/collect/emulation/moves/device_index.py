"""A device named by its bare index, as a GPU build reads it: CUDA's device of that number."""
from __future__ import annotations

import torch


def parse_to(func, args, kwargs):
    """Module.to's parser, given a device as a bare index (`model.to(0)`, `model.to(local_rank)`: CUDA's device
    0 on a GPU machine, the PyTorch DDP tutorial's way): the index is read as a CUDA device's, as a GPU build
    reads it; this build asks for an accelerator it does not have and raises."""
    if args and _is_index(args[0]):
        args = (torch.device("cuda", args[0]), *args[1:])
    if "device" in kwargs and _is_index(kwargs["device"]):
        kwargs = {**kwargs, "device": torch.device("cuda", kwargs["device"])}
    return func(*args, **kwargs)


def _is_index(device) -> bool:
    return isinstance(device, int) and not isinstance(device, bool)
