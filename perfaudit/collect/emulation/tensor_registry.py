"""Tensors by identity, for the emulated CUDA device (placement.py): which are on the device, pinned,
from a DataLoader, made by the user's code; read by the placement mode on every torch call, so the
look-ups are plain dict reads."""
from __future__ import annotations

import weakref

import torch

Tensor = torch.Tensor


def is_cuda(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, int) and not isinstance(device, bool)


class Registry:
    """Tensors by identity (weakly): equal tensors are different tensors, and a dead one is forgotten."""

    def __init__(self):
        refs = self._refs = {}

        def gone(ref):  # one callback for every entry: the KeyedRef carries its key
            if refs.get(ref.key, (None,))[0] is ref:
                del refs[ref.key]
        self._gone = gone

    def __bool__(self) -> bool:
        return bool(self._refs)

    def __len__(self) -> int:
        return len(self._refs)

    def get(self, t):
        entry = self._refs.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    def has(self, t) -> bool:
        entry = self._refs.get(id(t))
        return entry is not None and entry[0]() is t

    def add(self, t, value=True) -> None:
        try:
            self._refs[id(t)] = (weakref.KeyedRef(t, self._gone, id(t)), value)
        except TypeError:
            pass


def first_placed(items, registry: Registry):
    """The registry's value for the first tensor among `items` (one level of lists and tuples) it holds."""
    refs = registry._refs
    for a in items:
        if isinstance(a, Tensor):
            entry = refs.get(id(a))
            if entry is not None and entry[0]() is a:
                return entry[1]
        elif isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, Tensor):
                    entry = refs.get(id(b))
                    if entry is not None and entry[0]() is b:
                        return entry[1]
    return None


def tag(out, registry: Registry, value=True) -> None:
    if isinstance(out, Tensor):
        registry.add(out, value)
    elif isinstance(out, (list, tuple)):
        for t in out:
            if isinstance(t, Tensor):
                registry.add(t, value)


TAGGABLE = (Tensor, list, tuple)


_LAZY_CLONE = getattr(torch, "_lazy_clone", None)  # torch >= 2.4: copy-on-write


def copied(t: Tensor) -> Tensor:
    """The tensor a move to the (emulated) device makes: a copy the script may write to without touching the
    source. Copy-on-write where torch has it, so a batch's bytes are copied only if one side writes (a moved
    image batch cost a real copy of its megabytes per step). A plain clone for a source that is not all of its
    storage: a slice of a dataset tensor would share, and on a write copy, the whole dataset; a non-contiguous
    one's GPU copy is contiguous."""
    if (_LAZY_CLONE is not None and t.storage_offset() == 0 and t.is_contiguous()
            and t.untyped_storage().nbytes() == t.numel() * t.element_size()):
        try:
            return _LAZY_CLONE(t)
        except RuntimeError:  # memory it cannot share: a DataLoader worker's batch, in shared memory
            pass
    return t.clone()


def tensor_bytes(t) -> int:
    return t.numel() * t.element_size() if isinstance(t, Tensor) else 0
