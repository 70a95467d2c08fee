"""The edits of a DataLoader and the copies of its batches: pinned memory with non-blocking copies (COPY001),
worker processes (DATA001), on the loader the run saw; a worker count that comes from the script's own option
is given as that option to pass."""
from __future__ import annotations

import libcst as cst

from ..static.batch_option import loader_option
from .cst import LineTransformer, call_attr, edit, has_star, keyword, set_kwarg


def _loader_call(node: cst.Call) -> bool:
    return call_attr(node) == "DataLoader"


@edit("pin_memory")
class PinMemory(LineTransformer):
    """non_blocking=True on the located copies; pin_memory=True on the DataLoader the run saw."""

    def __init__(self, lines, params):
        loader_line = params.get("loader_line")
        super().__init__(lines | ({loader_line} if isinstance(loader_line, int) and params.get("loader_here") else set()),
                         params)
        self.loader_line = loader_line if params.get("loader_here") else None

    def leave_Call(self, original, updated):
        line = self.hit(original)
        if line is None:
            return updated
        if _loader_call(original) and line == self.loader_line:
            if self.params.get("loader_on_device"):
                self.refused(original, "its Dataset returns tensors on the GPU: pin_memory=True would raise "
                                       "\"cannot pin\"; the copies below are what to fix")
                return updated
            if has_star(original):
                self.refused(original, "the DataLoader takes **kwargs: add pin_memory=True where they are built")
                return updated
            self.changed(original, "DataLoader(..., pin_memory=True)")
            return set_kwarg(updated, "pin_memory", cst.Name("True"))
        name = call_attr(original)
        if name in ("to", "cuda") and isinstance(original.func, cst.Attribute) and not has_star(original):
            if keyword(original, "non_blocking") is None:
                self.changed(original, f".{name}(..., non_blocking=True)")
                return set_kwarg(updated, "non_blocking", cst.Name("True"))
        return updated


@edit("loader_workers")
class LoaderWorkers(LineTransformer):
    def leave_Call(self, original, updated):
        if not _loader_call(original) or self.hit(original) is None:
            return updated
        workers = self.params.get("workers")
        if self.params.get("on_device"):
            self.refused(original, "its Dataset returns tensors on the GPU, which worker processes cannot make: "
                                   "index whole batches instead (`perfaudit explain DATA001`)")
            return updated
        if not isinstance(workers, int) or workers < 1:
            self.refused(original, "no measured worker count (the run did not time this loader)")
            return updated
        if has_star(original):
            self.refused(original, "the DataLoader takes **kwargs: set num_workers where they are built")
            return updated
        current = keyword(original, "num_workers")
        if current is not None and not isinstance(current.value, cst.Integer):
            code = cst.Module([]).code_for_node(current.value)
            path = self.params.get("_path")
            opt = loader_option(path, self.span(original)[0], "num_workers") if isinstance(path, str) else None
            where = (f", the script's option {opt[0]} (at line {opt[1]}): run it with `{opt[0]} {workers}`, or make "
                     f"{workers} its default") if opt else f": set it to {workers} where that is defined"
            self.refused(original, f"num_workers comes from `{code}`{where}")
            return updated
        updated = set_kwarg(updated, "num_workers", cst.Integer(str(workers)))
        if keyword(original, "persistent_workers") is None:
            updated = set_kwarg(updated, "persistent_workers", cst.Name("True"))
        self.changed(original, f"num_workers={workers}, persistent_workers=True")
        return updated
