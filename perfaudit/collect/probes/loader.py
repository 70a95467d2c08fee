"""The DataLoader probe: where each loader was built and with what settings, how many batches of what
size it gave in the window, and the hook that marks a batch fetched (a flush point for the session).
A loader built before the session (a callback's) is taken in when it is iterated, its site unknown; one a
library rebuilds from the user's (accelerate's prepare(), Lightning adding a sampler) is located where the
user built the original."""
from __future__ import annotations

import sys
import time
import weakref
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

import torch

from ..internal import record_internal_error
from ..userframes import is_user_file, user_site
from ..wrap import patch, wrap


def loader_settings(loader) -> dict:
    return {"num_workers": loader.num_workers, "pin_memory": loader.pin_memory,
            "persistent_workers": loader.persistent_workers, "prefetch_factor": loader.prefetch_factor,
            "batch_size": loader.batch_size, "dataset_len": _length(loader.dataset), "_dataset": id(loader.dataset)}


def _length(dataset) -> int | None:
    """The dataset's number of samples, when it says (an IterableDataset need not; a broken __len__ is not ours)."""
    try:
        n = len(dataset)
    except Exception:  # noqa: BLE001 - the user's __len__: whatever it raises, the length is unknown
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


def _tensors_nbytes(obj, depth: int = 0) -> tuple[int, bool]:
    """Bytes of the tensors in a batch and whether they are all pinned."""
    if depth > 4:
        return 0, True
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size(), bool(obj.is_pinned()) if obj.device.type == "cpu" else True
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    total, pinned = 0, True
    for item in items:
        n, p = _tensors_nbytes(item, depth + 1)
        total, pinned = total + n, pinned and p
    return total, pinned


def _on_device(obj, placement, depth: int = 0) -> bool:
    """Whether a batch holds a tensor on the GPU (or on the emulated one): a Dataset that returns CUDA
    tensors, which worker processes cannot make and pin_memory cannot pin."""
    if depth > 4:
        return False
    if isinstance(obj, torch.Tensor):
        return obj.device.type not in ("cpu", "meta") or (placement is not None and placement.on_device.has(obj))
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    return any(_on_device(item, placement, depth + 1) for item in items)


class LoaderProbes:
    """Mixed into Probes (probes.py), which holds `loaders`, `placement`, `window_step` and the hooks."""

    if TYPE_CHECKING:
        from ..emulation.placement import Placement
        loaders: dict[int, dict]
        fetch_s: float
        fetch_wait_s: float
        wait_clock: Callable[[], float | None] | None
        placement: Placement | None  # the emulated CUDA device, when the run emulates one

    def _install_loader_probes(self) -> None:
        dl = torch.utils.data.DataLoader
        wrap(dl, "__init__", self._loader_init)
        original_iter = dl.__iter__

        def __iter__(loader):
            iterator = original_iter(loader)
            try:
                iterator._perfaudit_loader = id(loader)
                if id(loader) not in self.loaders:  # built before the session (a callback's): no site known
                    self._loader_init((loader,), {}, site=None)
                # the settings it iterates with: `iter(make_loader())` keeps only the iterator alive
                self.loaders[id(loader)]["settings"] = loader_settings(loader)
                self.on_iter(id(loader))
            except Exception as exc:
                record_internal_error("DataLoader probe", exc)
            return iterator

        patch(dl, "__iter__", __iter__)
        it = torch.utils.data.dataloader._BaseDataLoaderIter
        original_next = it.__next__
        probes = self

        def __next__(self_it):
            probes.before_batch()
            placement = probes.placement
            clock = probes.wait_clock
            waited = clock() if clock is not None else None  # read before the fetch's clock starts: not in it
            began = time.perf_counter()
            try:
                if placement is None:
                    batch = original_next(self_it)
                else:  # a Dataset's __getitem__ runs in here: what it moves to the device, it moves per sample
                    begun = placement.fetch_begins(getattr(self_it, "_perfaudit_loader", None))
                    try:
                        batch = original_next(self_it)
                    finally:
                        placement.fetch_ends(begun)
            finally:
                probes.fetch_s += time.perf_counter() - began
                now = clock() if waited is not None else None
                if now is not None:
                    probes.fetch_wait_s += max(now - waited, 0.0)
            try:
                if placement is not None:
                    placement.loader_batch(batch)
                probes._batch(self_it, batch)
            except Exception as exc:
                record_internal_error("DataLoader probe", exc)
            return batch

        patch(it, "__next__", __next__)

    def _loader_init(self, args, kwargs, site: dict | None | bool = False):
        site = (self._rebuilt_from() or user_site(3)) if site is False else site
        self.loaders[id(args[0])] = {"site": site, "_ref": weakref.ref(args[0]),
                                     "batches": 0, "window_batches": 0, "batch_bytes": 0, "pinned": True}

    def _rebuilt_from(self) -> dict | None:
        """A DataLoader a library rebuilds from the user's (accelerate's prepare(), Lightning adding a
        distributed sampler) is located where the user built the original: its settings came from there."""
        frame: FrameType | None = sys._getframe(3)
        while frame is not None and not is_user_file(frame.f_code.co_filename):
            for value in list(frame.f_locals.values()):
                known = self.loaders.get(id(value)) if isinstance(value, torch.utils.data.DataLoader) else None
                if known and known.get("site"):
                    return known["site"]
            frame = frame.f_back
        return None

    def _batch(self, iterator, batch):
        info = self.loaders.get(getattr(iterator, "_perfaudit_loader", None))
        if info is not None:
            nbytes, pinned = _tensors_nbytes(batch)
            info["batches"] += 1
            step = self.window_step()
            if step is not None:
                info["window_batches"] += 1
                by_step = info.setdefault("window_batches_by_step", {})
                by_step[str(step)] = by_step.get(str(step), 0) + 1
            info["batch_bytes"] = max(info["batch_bytes"], nbytes)
            info["pinned"] = info["pinned"] and pinned
            info["on_device"] = info.get("on_device") or _on_device(batch, self.placement)
        self.on_batch(getattr(iterator, "_perfaudit_loader", None))

