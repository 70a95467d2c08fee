"""verify's B run of a fix that takes a layer's bias away (BN001): the same initial weights as A's.

torch initialises every layer from one random stream, the bias of a Linear or Conv after its weight. A
layer built without its bias draws less, and every layer built after it starts from other weights: the
loss of A and B then differs from the first step, and the fix can only be judged by a loose statistical
check (which passed a fix that had also removed a classifier head's bias). Where the fix removed a bias,
B still makes the bias's draw (and throws it away), so each remaining weight is A's: a bias before a
BatchNorm in training changes nothing the norm lets through, and the loss must match A's step for step.
"""
from __future__ import annotations

import math
import os

import torch

from ..userframes import user_site
from ..wrap import patch


def keep_bias_draws(lines: dict[str, list[int]]) -> None:
    """At these lines (path -> lines of the fixed source), a Linear or Conv built without a bias draws
    the random numbers its bias's initialisation would have drawn."""
    wanted = {(os.path.realpath(path), int(line)) for path, at in lines.items() for line in at}
    for owner in (torch.nn.Linear, torch.nn.modules.conv._ConvNd):
        original = owner.reset_parameters

        def reset_parameters(self, _original=original):
            _original(self)
            if getattr(self, "bias", 0) is None and _built_at(wanted):
                _draw_as_a_bias(self)
        patch(owner, "reset_parameters", reset_parameters)


def _built_at(wanted: set) -> bool:
    site = user_site(3)
    return site is not None and (os.path.realpath(site["path"]), site["line"]) in wanted


def _draw_as_a_bias(layer) -> None:
    """torch's own bias initialisation (Linear and _ConvNd.reset_parameters): uniform in ±1/sqrt(fan_in)."""
    weight = layer.weight
    if weight is None or weight.is_meta or isinstance(weight, torch.nn.parameter.UninitializedParameter):
        return
    fan_in, _ = torch.nn.init._calculate_fan_in_and_fan_out(weight)
    bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
    size = layer.out_features if isinstance(layer, torch.nn.Linear) else layer.out_channels
    with torch.no_grad():
        torch.empty(size, dtype=weight.dtype, device=weight.device).uniform_(-bound, bound)
