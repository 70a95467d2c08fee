"""Tensors by identity, for the emulated CUDA device (placement.py): which are on the device, pinned,
from a DataLoader, made by the user's code; read by the placement mode on every torch call, so the
look-ups are plain dict reads."""
from __future__ import annotations

import weakref

import torch
import torch.nn.parameter

# a lazy module's parameter before its first forward (torch.nn.UninitializedParameter, ...Buffer)
_UNINITIALIZED = getattr(torch.nn.parameter, "UninitializedTensorMixin", ())

Tensor = torch.Tensor


def is_cuda(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, int) and not isinstance(device, bool)


class KeyedRef(weakref.ref):
    """A weak reference that carries its registry key, as weakref.KeyedRef does, but made without Python
    code: weakref.KeyedRef's __new__ and __init__ are two Python calls (each an event of the profiler's
    Python tracer) per tensor tagged, on every op of a device tensor. Set `key` after making it."""
    __slots__ = ("key",)
    key: int


class Registry:
    """Tensors by identity (weakly): equal tensors are different tensors, and a dead one is forgotten."""

    def __init__(self):
        refs = self._refs = {}

        def gone(ref):  # one callback for every entry: the KeyedRef carries its key
            key = ref.key
            if key in refs and refs[key][0] is ref:
                del refs[key]
        self._gone = gone

    def __bool__(self) -> bool:
        return bool(self._refs)

    def __len__(self) -> int:
        return len(self._refs)

    def get(self, t):
        refs, key = self._refs, id(t)
        return refs[key][1] if key in refs and refs[key][0]() is t else None

    def has(self, t) -> bool:
        refs, key = self._refs, id(t)
        return key in refs and refs[key][0]() is t

    def add(self, t, value=True) -> None:
        try:
            ref = KeyedRef(t, self._gone)
        except TypeError:
            return
        ref.key = key = id(t)
        self._refs[key] = (ref, value)

    def nbytes(self) -> int:
        """The bytes the tensors held now occupy, each storage once (views share theirs), in the CUDA
        allocator's 512-byte blocks."""
        seen, total = set(), 0
        for ref, _ in list(self._refs.values()):
            t = ref()
            if t is None:
                continue
            try:
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key not in seen:
                    seen.add(key)
                    total += -(-storage.nbytes() // 512) * 512
            except Exception:  # noqa: BLE001 - a tensor without storage (meta, sparse): its elements
                total += tensor_bytes(t)
        return total


# A type's kind on the hot path: 1 a tensor, 2 a list or tuple, 0 anything else (a torch.Size too: a tuple of
# ints, the answer of every `.shape` and `.size()`, which holds nothing to follow). Read as
# `KINDS[cls] if cls in KINDS else kind_of(cls)`: operators, not calls (the profiler's Python tracer
# records every call, builtins like isinstance and dict.get included, and a step makes thousands).
KINDS: dict[type, int] = {}


def kind_of(cls: type) -> int:
    kind = KINDS[cls] = 1 if issubclass(cls, Tensor) else \
        2 if issubclass(cls, (list, tuple)) and not issubclass(cls, torch.Size) else 0
    return kind


def first_placed(items, registry: Registry):
    """The registry's value for the first tensor among `items` (one level of lists and tuples) it holds."""
    refs = registry._refs
    for a in items:
        cls = type(a)
        kind = KINDS[cls] if cls in KINDS else kind_of(cls)
        if kind == 1:
            key = id(a)
            if key in refs and refs[key][0]() is a:
                return refs[key][1]
        elif kind == 2:
            for b in a:
                cls = type(b)
                if (KINDS[cls] if cls in KINDS else kind_of(cls)) == 1:
                    key = id(b)
                    if key in refs and refs[key][0]() is b:
                        return refs[key][1]
    return None


def tag(out, registry: Registry, value=True) -> None:
    if isinstance(out, Tensor):
        registry.add(out, value)
    elif isinstance(out, (list, tuple)):
        for t in out:
            if isinstance(t, Tensor):
                registry.add(t, value)


_LAZY_CLONE = getattr(torch, "_lazy_clone", None)  # torch >= 2.4: copy-on-write


def copied(t: Tensor) -> Tensor:
    """The tensor a move to the (emulated) device makes: a copy the script may write to without touching the
    source. Copy-on-write where torch has it, so a batch's bytes are copied only if one side writes (a moved
    image batch cost a real copy of its megabytes per step). A plain clone for a source that is not all of its
    storage: a slice of a dataset tensor would share, and on a write copy, the whole dataset; a non-contiguous
    one's GPU copy is contiguous."""
    if isinstance(t, _UNINITIALIZED):  # a lazy module's parameter, moved before its first forward: its
        return t.data.clone()                     # empty placeholder (its shape, storage, even numel are refused)
    if t.layout is not torch.strided:  # a sparse tensor (a graph's adjacency) has no one storage to share
        return t.clone()
    if (_LAZY_CLONE is not None and t.untyped_storage().nbytes() == t.nbytes  # then a contiguous one starts
            and t.is_contiguous()):                                               # at its storage's start
        try:
            return _LAZY_CLONE(t)
        except RuntimeError:  # memory it cannot share: a DataLoader worker's batch, in shared memory
            pass
    return t.clone()


_SPARSE_PARTS = {torch.sparse_coo: ("_indices", "_values"), torch.sparse_csr: ("crow_indices", "col_indices", "values"),
                 torch.sparse_csc: ("ccol_indices", "row_indices", "values"),
                 torch.sparse_bsr: ("crow_indices", "col_indices", "values"),
                 torch.sparse_bsc: ("ccol_indices", "row_indices", "values")}


def tensor_bytes(t) -> int:
    """The bytes a tensor's elements take on the device; a sparse one's, its indices and values."""
    if not isinstance(t, Tensor) or isinstance(t, _UNINITIALIZED):  # a lazy parameter holds nothing yet
        return 0
    parts = _SPARSE_PARTS.get(t.layout)
    if parts is None:
        return t.numel() * t.element_size()
    try:
        return sum(tensor_bytes(getattr(t, part)()) for part in parts)
    except RuntimeError:  # an uncoalesced tensor's indices, say: its dense size bounds it
        return t.numel() * t.element_size()
