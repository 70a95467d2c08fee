"""The edit of a model's layers: bias=False on the Conv/Linear a BatchNorm follows (BN001), and only on it."""
from __future__ import annotations

import os

import libcst as cst

from .cst import LineTransformer, call_attr, edit, has_star, set_kwarg


def _layer_call(node) -> bool:
    name = call_attr(node) if isinstance(node, cst.Call) else ""
    return name.startswith("Conv") or name == "Linear"


def _norm_call(node) -> bool:
    return isinstance(node, cst.Call) and "BatchNorm" in call_attr(node)


def _followed_by_norm(layers: list[cst.BaseExpression], container) -> set[int]:
    """The layer calls that a BatchNorm constructor follows as the next item of the same Sequential(...) or
    list/tuple: in `nn.Sequential(nn.Linear(..), nn.BatchNorm1d(..), nn.ReLU(), nn.Linear(..))` the first
    Linear feeds the norm and the head does not."""
    items = ([a.value for a in container.args] if isinstance(container, cst.Call)
             else [e.value for e in container.elements])
    return {id(item) for item, after in zip(items, items[1:]) if any(item is l for l in layers) and _norm_call(after)}


@edit("conv_bias_off")
class ConvBiasOff(LineTransformer):
    """bias=False on the layer a BatchNorm follows, and only on it: a line that builds several layers is
    edited where the source says which one feeds the norm (the next item of a Sequential or list); a line
    that also built layers the run saw with no norm after them (a helper called with and without one) is
    left alone, said."""

    def visit_Module(self, node) -> None:
        self._layers_by_line: dict[int, list[cst.Call]] = {}
        self._followed: set[int] = set()
        mixed = self.params.get("mixed") or []
        here = self.params.get("_path")
        self._mixed_lines = {line for path, line in mixed if isinstance(path, str) and here
                             and os.path.realpath(path) == here}
        self._scan(node)  # every layer of a line is known before the first of them is edited

    def _scan(self, node) -> None:
        if isinstance(node, cst.Call):
            line = self.hit(node) if _layer_call(node) else None
            if line is not None:
                self._layers_by_line.setdefault(line, []).append(node)
            if call_attr(node) in ("Sequential", "ModuleList"):
                self._followed |= _followed_by_norm([a.value for a in node.args if _layer_call(a.value)], node)
        elif isinstance(node, (cst.List, cst.Tuple)):
            self._followed |= _followed_by_norm([e.value for e in node.elements if _layer_call(e.value)], node)
        for child in node.children:
            self._scan(child)

    def leave_Call(self, original, updated):
        line = self.hit(original) if _layer_call(original) else None
        if line is None:
            return updated
        name = call_attr(original)
        on_line = self._layers_by_line.get(line, [original])
        if len(on_line) > 1 and id(original) not in self._followed:
            if not any(id(call) in self._followed for call in on_line):
                self.refused(original, f"{len(on_line)} Conv/Linear layers on this line and the source does not "
                                       "say which one a BatchNorm follows: pass bias=False to that one by hand")
            return updated  # another layer of the line feeds the norm; this one (a head, say) keeps its bias
        if len(on_line) == 1 and line in self._mixed_lines:
            self.refused(original, f"this {name}(...) also built layers the run saw with no BatchNorm after them "
                                   "(a helper called with and without one): pass bias=False only where a "
                                   "BatchNorm follows (e.g. bias=not normalize)")
            return updated
        if has_star(original) or len([a for a in original.args if a.keyword is None]) >= 8:
            self.refused(original, f"{name}(...) sets bias positionally or through *args/**kwargs")
            return updated
        self.changed(original, f"{name}(..., bias=False)")
        return set_kwarg(updated, "bias", cst.Name("False"))
