"""The edits, one libcst transformer per fix kind (catalog.py), registered like facts and static checks.

Each transformer changes only the nodes on the lines a finding located, keeps comments and formatting
(a concrete syntax tree, as TorchFix does), and notes what it changed and what it could not change and
why, so that `perfaudit fix` never edits silently and never guesses."""
from __future__ import annotations

import libcst as cst

from ..calls import CREATION, DISTRIBUTIONS, FOREACH_OPTIMIZERS, FRAMEWORK_OPTIMIZER_OPTIONS, FUSABLE_OPTIMIZERS
from . import layer_edits, loader_edits  # noqa: F401  (register conv_bias_off; pin_memory, loader_workers)
from .cst import (
    EDITS,
    BlockTransformer,
    LineTransformer,
    Outcome,
    call_attr,
    dotted,
    drop_arg,
    edit,
    has_star,
    keyword,
    set_kwarg,
)

__all__ = ["EDITS", "Outcome"]


@edit("set_to_none")
class SetToNone(LineTransformer):
    def leave_Call(self, original, updated):
        if call_attr(original) != "zero_grad" or self.hit(original) is None:
            return updated
        positional = [a for a in updated.args if a.keyword is None and not a.star]
        if positional:
            updated = drop_arg(updated, positional[0])
        self.changed(original, "zero_grad(set_to_none=True)")
        return set_kwarg(updated, "set_to_none", cst.Name("True"))

    def leave_SimpleStatementLine(self, original, updated):
        # `p.grad.zero_()` / `p.grad.data.zero_()` as a statement: `p.grad = None`
        if len(updated.body) != 1 or not isinstance(updated.body[0], cst.Expr) or self.hit(original) is None:
            return updated
        call = updated.body[0].value
        if not (isinstance(call, cst.Call) and call_attr(call) == "zero_" and not call.args):
            return updated
        target = call.func.value
        if isinstance(target, cst.Attribute) and target.attr.value == "data":
            target = target.value
        if not (isinstance(target, cst.Attribute) and target.attr.value == "grad"):
            return updated
        self.changed(original, f"{cst.Module([]).code_for_node(target)} = None")
        return updated.with_changes(body=[cst.Assign(targets=[cst.AssignTarget(target)], value=cst.Name("None"))])


_DEBUG_CONTEXTS = ("detect_anomaly", "emit_nvtx", "emit_itt")


@edit("debug_off")
class DebugOff(LineTransformer):
    def leave_SimpleStatementLine(self, original, updated):
        if len(updated.body) != 1 or not isinstance(updated.body[0], cst.Expr) or self.hit(original) is None:
            return updated
        call = updated.body[0].value
        if isinstance(call, cst.Call) and call_attr(call) == "_record_memory_history":
            return self._history_off(original, updated, call)
        if isinstance(call, cst.Call) and call_attr(call) == "set_detect_anomaly" and call.args:
            value = call.args[0].value
            if isinstance(value, cst.Name) and value.value == "True":
                self.changed(original, "removed set_detect_anomaly(True)")
                return cst.RemoveFromParent()
            if not (isinstance(value, cst.Name) and value.value == "False"):  # a flag: the user's switch
                self._switch_kept(original, "set_detect_anomaly", value)
        return updated

    def _history_off(self, original, updated, call):
        """`_record_memory_history(...)` that turned the recording on ("all" by default, "state", True) goes; one
        whose `enabled` is a variable is the user's switch."""
        enabled = next((a.value for a in call.args if a.keyword is None or a.keyword.value == "enabled"), None)
        if enabled is None or isinstance(enabled, cst.SimpleString) or (
                isinstance(enabled, cst.Name) and enabled.value == "True"):
            self.changed(original, "removed _record_memory_history(...): the memory history stays off")
            return cst.RemoveFromParent()
        if not (isinstance(enabled, cst.Name) and enabled.value in ("None", "False")):
            self._switch_kept(original, "_record_memory_history", enabled)
        return updated

    def _switch_kept(self, original, api: str, value) -> None:
        """A debug API turned on by a variable: the user's switch, refused with where to turn it off."""
        code = cst.Module([]).code_for_node(value)
        self.refused(original, f"{api}({code}) was on in this run: turn `{code}` off where it is set (a debug "
                               "switch is yours to keep)")

    def leave_With(self, original, updated):
        if self.hit(original.items[0]) is None or len(updated.items) != 1:
            return updated
        item = updated.items[0]
        call = item.item
        if not isinstance(call, cst.Call):
            return updated
        name = call_attr(call)
        profiler = name == "profile" and "autograd" in dotted(call.func)
        if name not in _DEBUG_CONTEXTS and not profiler:
            if name == "profile":
                self.refused(original, "the script's own torch.profiler: remove it by hand if its output is not needed")
            return updated
        if item.asname is not None:
            self.refused(original, f"`with {name}(...) as …`: its result is used; remove it by hand")
            return updated
        self.changed(original, f"unwrapped `with {name}(...)`")
        body = updated.body
        if isinstance(body, cst.SimpleStatementSuite):
            return cst.FlattenSentinel([cst.SimpleStatementLine(body=body.body)])
        first, *rest = body.body
        return cst.FlattenSentinel([first.with_changes(leading_lines=[*updated.leading_lines, *first.leading_lines]),
                                    *rest])


class _CudnnFlag(BlockTransformer):
    VALUE = True

    def __init__(self, lines, params):
        super().__init__(lines, params)
        # a script that asks for reproducible convolutions (cudnn.deterministic = True) keeps its choice
        self.kept = self.VALUE and bool(params.get("deterministic"))
        self.done = self.kept
        if self.kept and lines:
            self.outcome.refused.append((min(lines), "the script sets cudnn.deterministic = True: benchmarking may "
                                                     "pick other algorithms from run to run; yours to weigh"))

    def leave_Assign(self, original, updated):
        target = updated.targets[0].target if len(updated.targets) == 1 else None
        if self.kept or target is None or not dotted(target).endswith("cudnn.benchmark") or self.hit(original) is None:
            return updated
        self.done = True
        self.changed(original, f"torch.backends.cudnn.benchmark = {self.VALUE}")
        return updated.with_changes(value=cst.Name(str(self.VALUE)))

    def leave_Module(self, original, updated):
        module = super().leave_Module(original, updated)
        if self.lines and not self.done and self.VALUE:
            self.outcome.refused.append((min(self.lines), "no statement to put the flag before"))
        return module

    def edit_block(self, originals, updated):
        """The flag set just before the located statement (where the optimizer is built) when the
        script does not assign it there already."""
        if self.done or not self.VALUE:
            return updated
        for i, stmt in enumerate(originals):
            # a simple statement at the line, or a block that starts there (the `if args.seed …:` that sets
            # the flag on another path: the flag goes before it, so that path still has the last word)
            at_line = self.hit(stmt) is not None if isinstance(stmt, cst.SimpleStatementLine) else \
                isinstance(stmt, cst.BaseCompoundStatement) and self.span(stmt)[0] in self.lines
            if at_line and not (isinstance(stmt, cst.SimpleStatementLine) and self._assigns(stmt)):
                self.done = True
                line = cst.parse_statement("torch.backends.cudnn.benchmark = True  # fixed input shapes\n")
                self.outcome.changed.append((self.span(stmt)[0], "torch.backends.cudnn.benchmark = True"))
                return [*updated[:i], line.with_changes(leading_lines=stmt.leading_lines),
                        updated[i].with_changes(leading_lines=[]), *updated[i + 1:]]
        return updated

    @staticmethod
    def _assigns(stmt) -> bool:
        return any(isinstance(s, cst.Assign) and dotted(s.targets[0].target).endswith("cudnn.benchmark")
                   for s in stmt.body)


@edit("cudnn_benchmark_on")
class CudnnOn(_CudnnFlag):
    VALUE = True

    def leave_Call(self, original, updated):
        """A Lightning Trainer at the located line takes `benchmark=True` (it sets the flag for its run, over
        an assignment before it); a `benchmark=` the script computes is left to the user."""
        if self.done or call_attr(original) != "Trainer" or self.hit(original) is None or has_star(original):
            return updated
        self.done = True
        given = keyword(original, "benchmark")
        if given is not None and not (isinstance(given.value, cst.Name) and given.value.value in ("False", "None")):
            self.refused(original, "the Trainer's benchmark= comes from the script's own code: set it to True there")
            return updated
        self.changed(original, "Trainer(..., benchmark=True)")
        return set_kwarg(updated, "benchmark", cst.Name("True"))


@edit("cudnn_benchmark_off")
class CudnnOff(_CudnnFlag):
    VALUE = False


# a framework's option naming a non-fused optimizer -> its fused one: `TrainingArguments(optim="adamw_torch")`,
# or the same entry of a config dict
_FUSED_OPTION = {(key, name): fused for key, names in FRAMEWORK_OPTIMIZER_OPTIONS.values()
                 for name, fused in names.items()}


@edit("optimizer_multi_tensor")
class OptimizerMultiTensor(LineTransformer):
    def _option(self, original, updated, key):
        value = original.value
        fused = _FUSED_OPTION.get((key, getattr(value, "evaluated_value", None)))
        if fused is None or not isinstance(value, cst.SimpleString) or self.hit(value) is None:
            return updated
        self.changed(original, f'{key}="{fused}"')
        return updated.with_changes(value=cst.SimpleString(f'"{fused}"'))

    def leave_Arg(self, original, updated):
        return self._option(original, updated, original.keyword.value if original.keyword else None)

    def leave_DictElement(self, original, updated):
        return self._option(original, updated, getattr(original.key, "evaluated_value", None))

    def leave_Call(self, original, updated):
        name = call_attr(original)
        if name not in FOREACH_OPTIMIZERS or self.hit(original) is None:
            return updated
        if has_star(original):
            self.refused(original, f"{name}(...) takes **kwargs: set foreach/fused where they are built")
            return updated
        fused = bool(self.params.get("on_gpu") or self.params.get("cuda_path")) and name in FUSABLE_OPTIMIZERS
        chosen = "fused" if fused else "foreach"
        other = keyword(updated, "foreach" if fused else "fused")
        if other is not None:
            updated = drop_arg(updated, other)
        self.changed(original, f"{name}(..., {chosen}=True)")
        return set_kwarg(updated, chosen, cst.Name("True"))


@edit("remove_empty_cache")
class RemoveEmptyCache(LineTransformer):
    def leave_SimpleStatementLine(self, original, updated):
        if len(updated.body) != 1 or not isinstance(updated.body[0], cst.Expr) or self.hit(original) is None:
            return updated
        call = updated.body[0].value
        if isinstance(call, cst.Call) and call_attr(call) == "empty_cache":
            self.changed(original, "removed torch.cuda.empty_cache()")
            return cst.RemoveFromParent()
        return updated


def _factory(node) -> bool:
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and dotted(node.func.value) == "torch"
            and node.func.attr.value in CREATION and keyword(node, "device") is None and not has_star(node))


def _device_of_copy(call: cst.Call) -> cst.BaseExpression | None:
    """The device of `x.to(device)` / `x.cuda()`; None for any other form (dtype, several arguments)."""
    if call_attr(call) == "cuda" and not call.args:
        return cst.SimpleString('"cuda"')
    if call_attr(call) == "to" and len(call.args) == 1 and call.args[0].keyword is None and not call.args[0].star:
        return call.args[0].value
    return None


@edit("create_on_device")
class CreateOnDevice(BlockTransformer):
    """`torch.randn(...).to(device)` → `torch.randn(..., device=device)`; `x = torch.randn(...)`
    followed by `x = x.to(device)` → the creation takes `device=device` (the copy then does nothing)."""

    def leave_Call(self, original, updated):
        if self.hit(original) is None or not isinstance(updated.func, cst.Attribute):
            return updated
        device = _device_of_copy(updated)
        if device is None or not _factory(updated.func.value):
            return updated
        self.changed(original, "created with device=")
        return set_kwarg(updated.func.value, "device", device)

    def edit_block(self, originals, updated):
        updated = list(updated)
        for i, stmt in enumerate(originals):
            if i == 0 or not isinstance(stmt, cst.SimpleStatementLine) or self.hit(stmt) is None:
                continue
            copy = _copied_name(stmt)
            if copy is None:
                continue
            name, device = copy
            for j in range(i - 1, -1, -1):
                created = _created_name(updated[j])
                if created is not None and created[0] == name:
                    assign = updated[j].body[0]
                    updated[j] = updated[j].with_changes(body=[assign.with_changes(
                        value=set_kwarg(created[1], "device", device))])
                    self.outcome.changed.append((self.span(originals[j])[0], f"{name} created with device="))
                    break
        return updated



def _copied_name(stmt) -> tuple[str, cst.BaseExpression] | None:
    """(`x`, device) for `x = x.to(device)`."""
    if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
        return None
    assign = stmt.body[0]
    value = assign.value
    if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name) or not isinstance(value, cst.Call):
        return None
    if not isinstance(value.func, cst.Attribute):
        return None
    device = _device_of_copy(value)
    name = assign.targets[0].target.value
    if device is None or not (isinstance(value.func.value, cst.Name) and value.func.value.value == name):
        return None
    return name, device


def _created_name(stmt) -> tuple[str, cst.Call] | None:
    """(`x`, the call) for `x = torch.randn(...)`."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
        return None
    assign = stmt.body[0]
    if (len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name) and isinstance(assign.value, cst.Call)
            and _factory(assign.value)):
        return assign.targets[0].target.value, assign.value
    return None


@edit("accumulate_detached")
class AccumulateDetached(LineTransformer):
    """`total += loss.item()` → `total += loss.detach()`: the sum stays on the device and is read once,
    where it is printed or logged. Only that form: a branch or a print needs the value at once."""

    def __init__(self, lines, params):
        super().__init__(lines, params)
        self.in_accumulation = 0

    def visit_AugAssign(self, node):
        if isinstance(node.operator, cst.AddAssign) and self.hit(node) is not None:
            needed = self._needed_elsewhere(node)
            if needed:
                self.refused(node, needed)
                return False
            self.in_accumulation += 1
        return True

    def leave_AugAssign(self, original, updated):
        if isinstance(original.operator, cst.AddAssign) and self.hit(original) is not None and self.in_accumulation:
            self.in_accumulation -= 1
        return updated

    def _needed_elsewhere(self, node) -> str | None:
        """Why the sum must stay a Python number: code outside torch reads it later (`json.dumps(total)`,
        an environment, NumPy), where a tensor would break the script."""
        import ast

        from ..static.uses import _Uses
        target = node.target
        source = self.params.get("_source")
        if not isinstance(target, cst.Name) or not source:
            return None
        try:
            tree = ast.parse(source)
        except SyntaxError:
            return None
        uses = _Uses(tree)
        line = self.span(node)[0]
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and n.id == target.value and isinstance(n.ctx, ast.Load) and n.lineno != line:
                consumer = uses.consumer(n, through_arithmetic=True)
                if consumer:
                    return (f"`{target.value}` is later passed to `{consumer}` (line {n.lineno}), which needs a Python "
                            "number: as a tensor it would break there; keep the read, or convert where it is used")
        return None

    def leave_Call(self, original, updated):
        if not self.in_accumulation and self.hit(original) is not None:
            checked = _check_turned_off(updated)
            if checked is not None:
                self.changed(original, checked[1])
                return checked[0]
        if not self.in_accumulation or call_attr(updated) != "item" or updated.args:
            return updated
        self.changed(original, ".item() → .detach() in the running sum")
        return updated.with_changes(func=updated.func.with_changes(attr=cst.Name("detach")))


def _check_turned_off(call: cst.Call) -> tuple[cst.Call, str] | None:
    """torch's own per-step check of a device value, turned off where the call asks for it: a gradient clip's
    `error_if_nonfinite=True`, a torch.distributions constructor's argument checks (on by default). Neither
    changes a result; each raised only on a bad value."""
    name = call_attr(call)
    flag = keyword(call, "error_if_nonfinite")
    if name in ("clip_grad_norm_", "clip_grad_norm") and flag is not None and _is_true(flag.value):
        return set_kwarg(call, "error_if_nonfinite", cst.Name("False")), f"{name}(..., error_if_nonfinite=False)"
    validate = keyword(call, "validate_args")
    if name in DISTRIBUTIONS and not has_star(call) and (validate is None or _is_true(validate.value)):
        return set_kwarg(call, "validate_args", cst.Name("False")), f"{name}(..., validate_args=False)"
    return None


def _is_true(value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.Name) and value.value == "True"
