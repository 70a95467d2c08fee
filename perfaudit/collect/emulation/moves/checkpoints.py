"""`torch.load` onto the emulated device: a checkpoint resumed with `map_location="cuda:0"` (or a device, a
dict, `lambda storage, loc: storage.cuda(gpu)`, or none for a checkpoint saved on a GPU).

This CPU build cannot restore a storage to CUDA ("Storage device not recognized: cuda"), so a script that resumes
or fine-tunes from a file fell back to its CPU branch. Each storage torch would restore to CUDA stays on the host
instead, and every tensor the load returns on such a storage is placed on the device, its bytes a host-to-device
copy at the `torch.load` line, as a GPU run makes it.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Iterable

import torch
import torch.serialization as serialization
from torch.storage import _StorageBase

from ...internal import record_internal_error
from ...wrap import patch
from ..tensor_registry import is_cuda

_DEPTH = 8  # how deep the loaded object is searched for tensors (a state dict of dicts of an optimizer's state)


def load_onto_the_device(mode) -> None:
    """Patch torch.load for the placement mode (placement.Placement)."""
    original = torch.load
    lock = threading.Lock()  # the redirection is process-wide while a load runs: one load at a time

    @functools.wraps(original)
    def load(*args, **kwargs):
        restored: list = []  # the storages torch would have restored to CUDA
        with lock:
            default, to_cuda = serialization.default_restore_location, _StorageBase.cuda

            def restore(storage, location):
                if is_cuda(location if not isinstance(location, bytes) else location.decode()):
                    restored.append(storage)
                    return storage
                return default(storage, location)

            def cuda(self, device=None, non_blocking=False):  # a map_location function's `storage.cuda(gpu)`
                restored.append(self)
                return self

            serialization.default_restore_location = restore
            _StorageBase.cuda = cuda
            try:
                out = original(*args, **kwargs)
            finally:
                serialization.default_restore_location, _StorageBase.cuda = default, to_cuda
        if restored:
            _place(mode, out, restored)
        return out

    patch(torch, "load", load)


def _place(mode, loaded, restored: list) -> None:
    """Every tensor of `loaded` on a storage of `restored` is on the device; their bytes were copied there."""
    try:
        storages = {_key(storage) for storage in restored}
        nbytes = 0
        for tensor in _tensors(loaded, _DEPTH, set()):
            if _key(tensor.untyped_storage()) in storages and not mode.on_device.has(tensor):
                mode.on_device.add(tensor)
                mode._placed(tensor)
                nbytes += tensor.untyped_storage().nbytes()
        if nbytes:
            mode._copy_in(None, nbytes, non_blocking=False, api="torch.load(map_location=cuda)")
    except Exception as exc:  # noqa: BLE001  a record must never break the script
        record_internal_error("CUDA emulation", exc)


def _key(storage) -> int:
    """A storage's identity: its C object's (each `untyped_storage()` call makes another Python wrapper of it;
    its data pointer is 0 for every empty one)."""
    storage = getattr(storage, "_untyped_storage", storage)  # a TypedStorage (a map_location function's)
    return storage._cdata


def _tensors(obj, depth: int, seen: set):
    """The tensors in a loaded object: containers, a whole pickled module's parameters and buffers."""
    if isinstance(obj, torch.Tensor):
        yield obj
        return
    if depth <= 0 or id(obj) in seen:
        return
    seen.add(id(obj))
    items: Iterable
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, (list, tuple, set)):
        items = obj
    elif isinstance(obj, torch.nn.Module):
        items = [*obj.parameters(), *obj.buffers()]
    else:
        return
    for item in items:
        yield from _tensors(item, depth - 1, seen)
