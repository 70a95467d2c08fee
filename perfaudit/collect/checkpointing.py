"""Activation checkpointing applied to the script's own blocks, for a checkpointing plan (verify/checkpoint_plan.py,
tip T14): every module whose class has one of the given names runs its forward under
`torch.utils.checkpoint.checkpoint(..., use_reentrant=False)` while training with gradients, as the user
would wrap it: its inner activations are dropped after the forward and recomputed in backward. With `first`, only
the first that many instances to run a forward are (a plan that checkpoints just enough blocks to fit)."""
from __future__ import annotations

import torch

from .internal import record_internal_error
from .wrap import on_undo

_MARK = "_perfaudit_checkpointed"


def install(class_names: list[str], first: int | None = None) -> None:
    names = set(class_names)
    checkpoint = torch.utils.checkpoint.checkpoint
    wrapped = [0]

    def pre_hook(module, args):
        if type(module).__name__ not in names or _MARK in module.__dict__:
            return None
        if first is not None and wrapped[0] >= first:
            module.__dict__[_MARK] = False  # decided: this instance runs as it is
            return None
        wrapped[0] += 1
        try:
            original = module.forward

            def forward(*a, **k):
                if torch.is_grad_enabled() and module.training:
                    return checkpoint(original, *a, use_reentrant=False, **k)
                return original(*a, **k)
            module.__dict__["forward"] = forward  # this instance's, from this call on (looked up after the hooks)
            module.__dict__[_MARK] = True
        except Exception as exc:  # noqa: BLE001 - never break the user's script
            record_internal_error("checkpointing", exc)
        return None

    handle = torch.nn.modules.module.register_module_forward_pre_hook(pre_hook)
    on_undo(handle.remove)
