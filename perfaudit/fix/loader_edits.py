"""The edits of a DataLoader and the copies of its batches: pinned memory with non-blocking copies (COPY001),
worker processes (DATA001), on the loader the run saw, or on the `partial(DataLoader, ...)` the line that made it
called; a worker count that comes from the script's own option is given as that option to pass."""
from __future__ import annotations

import libcst as cst

from ..static.batch_option import loader_option
from .cst import LineTransformer, call_attr, dotted, edit, has_star, keyword, set_kwarg


def _loader_call(node: cst.Call) -> bool:
    return call_attr(node) == "DataLoader"


def _loader_partial(node: cst.BaseExpression) -> bool:
    """`partial(DataLoader, ...)`, `functools.partial(torch.utils.data.DataLoader, ...)`."""
    if not isinstance(node, cst.Call) or call_attr(node) != "partial" or not node.args:
        return False
    first = node.args[0]
    return first.keyword is None and not first.star and dotted(first.value).rsplit(".", 1)[-1] == "DataLoader"


class _Factories(cst.CSTVisitor):
    """The names a file binds to a partial of DataLoader (`make = partial(DataLoader, ...)`, `self.make = ...`,
    `Trainer(make=partial(DataLoader, ...))`) -> those partials; and every call, to find the located ones."""

    def __init__(self):
        super().__init__()
        self.bound: dict[str, list[cst.Call]] = {}
        self.calls: list[cst.Call] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        if _loader_partial(node.value):
            for target in node.targets:
                self._bind(dotted(target.target), node.value)

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None and _loader_partial(node.value):
            self._bind(node.keyword.value, node.value)

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def _bind(self, name: str, call) -> None:
        if name:
            self.bound.setdefault(name.rsplit(".", 1)[-1], []).append(call)


class _AccelerateNames(cst.CSTVisitor):
    """A file's `Accelerator(...)` calls and how it imports accelerate (`from accelerate import ...`, `import
    accelerate`)."""

    def __init__(self):
        super().__init__()
        self.accelerators: list[cst.Call] = []
        self.from_import: cst.ImportFrom | None = None
        self.module_import = False

    def visit_Call(self, node: cst.Call) -> None:
        if call_attr(node) == "Accelerator":
            self.accelerators.append(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.module is not None and dotted(node.module) == "accelerate" and not isinstance(node.names, cst.ImportStar):
            self.from_import = self.from_import or node

    def visit_Import(self, node: cst.Import) -> None:
        self.module_import |= any(dotted(a.name) == "accelerate" and a.asname is None for a in node.names)


CONFIG = "DataLoaderConfiguration"


@edit("pin_memory")
class PinMemory(LineTransformer):
    """non_blocking=True on the located copies; pin_memory=True on the DataLoader the run saw; where Accelerate
    moves the batches, `dataloader_config=DataLoaderConfiguration(non_blocking=True)` on the file's Accelerator."""

    def __init__(self, lines, params):
        loader_line = params.get("loader_line")
        super().__init__(lines | ({loader_line} if isinstance(loader_line, int) and params.get("loader_here") else set()),
                         params)
        self.loader_line = loader_line if params.get("loader_here") else None

    def visit_Module(self, node: cst.Module) -> bool:
        self.names = _AccelerateNames()
        if self.params.get("framework") == "Accelerate":
            node.visit(self.names)
        imported = self.names.from_import is not None and any(
            not isinstance(a.name, cst.Attribute) and a.name.value == CONFIG and a.asname is None
            for a in self.names.from_import.names)  # type: ignore[union-attr]
        self.config_name = (CONFIG if self.names.from_import is not None
                            else f"accelerate.{CONFIG}" if self.names.module_import else None)
        self.add_import = self.names.from_import is not None and not imported and any(
            keyword(c, "dataloader_config") is None and not has_star(c) for c in self.names.accelerators)
        return True

    def leave_ImportFrom(self, original, updated):
        if not (self.add_import and original is self.names.from_import):
            return updated
        names = list(updated.names)
        last = names[-1]
        names[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return updated.with_changes(names=[*names, cst.ImportAlias(name=cst.Name(CONFIG), comma=last.comma)])

    def leave_Call(self, original, updated):
        if any(original is c for c in self.names.accelerators):
            return self._accelerator(original, updated)
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

    def _accelerator(self, original, updated):
        current = keyword(original, "dataloader_config")
        if current is not None and isinstance(current.value, cst.Call) and call_attr(current.value) == CONFIG:
            flag = keyword(current.value, "non_blocking")
            if flag is not None and isinstance(flag.value, cst.Name) and flag.value.value == "True":
                return updated  # non-blocking already
        if current is not None or has_star(original) or self.config_name is None:
            shown = cst.Module([]).code_for_node(current.value) if current is not None else ""
            self.refused(original, f"the Accelerator's dataloader_config comes from `{shown}`: give its {CONFIG} "
                                   "non_blocking=True" if shown else
                                   f"pass dataloader_config={CONFIG}(non_blocking=True) to the Accelerator by hand")
            return updated
        self.changed(original, f"Accelerator(..., dataloader_config={CONFIG}(non_blocking=True))")
        value = cst.parse_expression(f"{self.config_name}(non_blocking=True)")
        return set_kwarg(updated, "dataloader_config", value, inline=True)


@edit("loader_workers")
class LoaderWorkers(LineTransformer):
    """num_workers on the DataLoader(...) at the located line; where that line calls a name the file binds to one
    `partial(DataLoader, ...)` (a loader factory passed to a trainer), on that partial."""

    def visit_Module(self, node: cst.Module) -> bool:
        found = _Factories()
        node.visit(found)
        self.via: dict[int, int] = {}   # id(partial) -> the located line whose call it makes the loader
        for call in found.calls:
            line = None if _loader_call(call) else self.hit(call)
            partials = found.bound.get(call_attr(call), []) if line is not None else []
            if line is not None and len(partials) == 1:
                self.via.setdefault(id(partials[0]), line)
        return True

    def leave_Call(self, original, updated):
        via = self.via.get(id(original))
        if via is None and (not _loader_call(original) or self.hit(original) is None):
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
        inline = via is not None   # away from the finding's line: move no line below
        updated = set_kwarg(updated, "num_workers", cst.Integer(str(workers)), inline)
        if keyword(original, "persistent_workers") is None:
            updated = set_kwarg(updated, "persistent_workers", cst.Name("True"), inline)
        what = f"num_workers={workers}, persistent_workers=True"
        self.changed(original, what if via is None else f"partial(DataLoader, ..., {what}), which makes the "
                                                         f"loader at line {via}")
        return updated
