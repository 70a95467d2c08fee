"""A random op given a generator of the other device raises on a GPU ("Expected a 'cuda' device type for generator
but found 'cpu'"): `torch.randint(..., generator=torch.Generator())` under `torch.set_default_device("cuda")`,
`torch.multinomial(probs_on_the_device, 1, generator=g)` with a host generator, a device generator for a host
draw. The emulated device draws everything on the CPU and would run such a script on: it raises as a GPU does,
at the user's line. A generator made for "cuda" says so (cuda_shim._Generator); any other is the host's."""
from __future__ import annotations

import torch
import torch.utils._device as _device_context

from .cuda_shim import gpu_error
from .tensor_registry import is_cuda

Tensor = torch.Tensor
# the factories that draw with a generator: on the device when told (device=, or torch's default device)
_FACTORIES = {torch.rand, torch.randn, torch.randint, torch.randperm, torch.normal}
# the ops that draw into or from a tensor: on its device
_OPS = {torch.multinomial, torch.bernoulli, torch.poisson, torch.normal, Tensor.multinomial, Tensor.bernoulli,
        Tensor.bernoulli_, Tensor.random_, Tensor.uniform_, Tensor.normal_, Tensor.exponential_, Tensor.geometric_,
        Tensor.log_normal_, Tensor.cauchy_}


def generator_handlers(mode) -> dict:
    """The mode's handlers for the generator-taking calls: a generator of the other device refused, else the
    mode's own path (Placement.DEFAULT)."""
    def check(func, args, kwargs):
        gen = kwargs.get("generator")
        if gen is not None:
            on_device = _draws_on_device(mode, func, args, kwargs)
            if on_device != bool(getattr(gen, "_emulated_cuda", False)):
                want, found = ("cuda", "cpu") if on_device else ("cpu", "cuda")
                raise gpu_error(f"Expected a '{want}' device type for generator but found '{found}'")
        return mode.DEFAULT
    return {func: check for func in _FACTORIES | _OPS}


def _draws_on_device(mode, func, args, kwargs) -> bool:
    device = kwargs.get("device")
    if device is not None:
        return is_cuda(device)
    first = next((a for a in args if isinstance(a, Tensor)), None)
    if first is not None:
        return mode.on_device.has(first)
    default = getattr(_device_context, "CURRENT_DEVICE", None)
    return func in _FACTORIES and default is not None and default.type == "cuda"
