"""TorchScript on the emulated device: a scripted or traced module (`torch.jit.script(model)`,
`torch.jit.trace`) and a scripted function run in TorchScript's interpreter, whose ATen calls no torch function
mode sees: left alone, their outputs would be host tensors (a GradScaler would make its scale from such a
loss on the host and copy it to the device twice a step in `unscale_`, a copy no GPU makes). Each call's outputs
are on the device when its inputs or its module's parameters are."""
from __future__ import annotations

import functools

import torch

from ...wrap import patch
from .follow import given_the_device, place_outputs


def scripted_code_follows(mode) -> None:
    def follows(original, owner_of):
        @functools.wraps(original)
        def call(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            if mode.on_device and given_the_device(mode, owner_of(self), args, kwargs):
                place_outputs(mode, out)
            return out
        return call

    patch(torch.jit.ScriptModule, "__call__", follows(torch.nn.Module.__call__, lambda module: module))
    patch(torch.jit.ScriptFunction, "__call__", follows(torch.jit.ScriptFunction.__call__, lambda fn: None))
