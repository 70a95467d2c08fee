"""perfaudit's watch of what autograd saves in a tracked step (the step's memory, on a GPU and on the emulated
device): a saved-tensors hook that keeps each tensor as it is."""
from __future__ import annotations

import contextlib

import torch


def saved_tensors_watch(packed):
    """A saved-tensors hook that notes what autograd saves and keeps it as it is; none while the script's own
    hooks are active (`save_on_cpu`, offloading): on top of them it would bypass them, and the step measured
    would not be the script's (its saved tensors are then not told apart from temporaries)."""
    if _top_hooks() is not None:
        return contextlib.nullcontext()
    return torch.autograd.graph.saved_tensors_hooks(packed, _unpacked)


def _unpacked(t):
    return t  # the watch's unpack hook: how saved_tensors_aside knows the watch


@contextlib.contextmanager
def saved_tensors_aside():
    """The watch above taken off for a call that refuses any saved-tensors hook (a torch.func transform: the
    script has none without perfaudit), and put back after it; what autograd saves inside the transform is
    freed with it, counted as the step's temporaries."""
    hooks = _top_hooks()
    ours = hooks is not None and hooks[1] is _unpacked
    if ours:
        torch._C._autograd._pop_saved_tensors_default_hooks()
    try:
        yield
    finally:
        if ours:
            torch._C._autograd._push_saved_tensors_default_hooks(*hooks)


def _top_hooks():
    """The innermost saved-tensors hooks in force (pack, unpack), else None."""
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    try:
        return top(False) if top is not None else None
    except (TypeError, RuntimeError):  # another signature: as if none
        return None
