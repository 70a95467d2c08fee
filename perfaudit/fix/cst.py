"""Building blocks of the edits: a transformer that knows the finding's lines and where each node
sits, and small helpers to read and change calls (keyword arguments, dotted names)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import PositionProvider

EDITS: dict[str, type[LineTransformer]] = {}


def edit(kind: str) -> Callable[[type], type]:
    def register(cls):
        EDITS[kind] = cls
        return cls
    return register


@dataclass
class Outcome:
    changed: list[tuple[int, str]] = field(default_factory=list)   # (line, what changed)
    refused: list[tuple[int, str]] = field(default_factory=list)   # (line, why it was left alone)


class LineTransformer(cst.CSTTransformer):
    """Base: knows the finding's lines and parameters, and where each node starts and ends."""
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, lines: set[int], params: dict):
        super().__init__()
        self.lines, self.params, self.outcome = lines, params, Outcome()

    def span(self, node: cst.CSTNode) -> tuple[int, int]:
        pos = self.get_metadata(PositionProvider, node)
        return pos.start.line, pos.end.line

    def hit(self, node: cst.CSTNode) -> int | None:
        """The finding line this node spans, if any."""
        start, end = self.span(node)
        return next((line for line in sorted(self.lines) if start <= line <= end), None)

    def changed(self, node, what: str) -> None:
        self.outcome.changed.append((self.span(node)[0], what))

    def refused(self, node, why: str) -> None:
        self.outcome.refused.append((self.span(node)[0], why))


class BlockTransformer(LineTransformer):
    """An edit made on a block's list of statements (insert one before another, change a statement
    from what an earlier one does), in function bodies and at module level alike."""

    def edit_block(self, originals, updated):
        return updated

    def leave_IndentedBlock(self, original, updated):
        return updated.with_changes(body=self.edit_block(original.body, updated.body))

    def leave_Module(self, original, updated):
        return updated.with_changes(body=self.edit_block(original.body, updated.body))


# -- small helpers on calls ------------------------------------------------------------------------
def dotted(node: cst.BaseExpression) -> str:
    """`torch.backends.cudnn.benchmark` for that attribute chain; "" for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr.value}" if head else ""
    return ""


def call_attr(call: cst.Call) -> str:
    """The last name of the called function: `zero_grad` for `opt.zero_grad()`."""
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else ""


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def has_star(call: cst.Call) -> bool:
    return any(a.star for a in call.args)


def _kwarg(name: str, value: cst.BaseExpression) -> cst.Arg:
    eq = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    return cst.Arg(value=value, keyword=cst.Name(name), equal=eq)


def set_kwarg(call: cst.Call, name: str, value: cst.BaseExpression, inline: bool = False) -> cst.Call:
    """`name=value` replaced if present, else appended in the call's own layout (a multi-line call
    keeps one argument per line and its trailing comma); `inline`: on the last argument's line, so that no
    line below moves (an edit away from the finding's own lines)."""
    args = list(call.args)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == name:
            args[i] = arg.with_changes(value=value)
            return call.with_changes(args=args)
    new = _kwarg(name, value)
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    if isinstance(last.comma, cst.Comma):   # a trailing comma: the new argument takes it over
        separator = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else last.comma
        if inline:
            separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        args[-1] = last.with_changes(comma=separator)
        new = new.with_changes(comma=last.comma)
    else:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, new])


def drop_arg(call: cst.Call, arg: cst.Arg) -> cst.Call:
    args = [a for a in call.args if a is not arg]
    if args and not any(a is arg for a in call.args[:-1]):   # the last one went: no dangling comma
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args)


def literal_source(value) -> cst.BaseExpression:
    return cst.parse_expression(repr(value))


# -- the edits ------------------------------------------------------------------------------------------
