"""Where a value read back to the host goes: reads the program needs are not syncs to remove.

`env.step(action.item())` in a reinforcement-learning loop, a value handed to NumPy or to any code
outside torch that needs a Python number: the read is required, and "accumulate with .detach()" would
break the program. A read that only feeds a log line, an accumulator or a branch is the classic
per-step sync. Followed one step at a time: the call a read is an argument of; a name it is assigned
to and then passed on; a function that returns it, through its callers in the same file.
"""
from __future__ import annotations

import ast

from ..calls import HOST_READS, call_name

# calls that only show or record a value: a read for them can be deferred (accumulate, log every N)
LOGGING = frozenset({"print", "format", "str", "repr", "log", "info", "debug", "warning", "error", "critical",
                     "add_scalar", "add_scalars", "add_histogram", "log_metrics", "log_dict", "set_postfix",
                     "set_description", "write", "update", "append", "extend", "insert", "setdefault"})
# calls a host number passes through unchanged in meaning (still the same read, go on up)
PASS_THROUGH = frozenset({"int", "float", "bool", "round", "abs", "min", "max", "sum", "len", "tuple", "list",
                          "numpy", "cpu", "tolist", "item", "detach", "squeeze", "reshape", "astype"})
_TORCH_ROOTS = ("torch", "F", "nn", "functional")
# tensor methods NumPy arrays do not have, which take an index or a tensor: `table.gather(-1, t.cpu())` reads `t`
# only because `table` was kept on the host; keeping it on the device (a buffer) removes the read
TENSOR_ONLY_METHODS = frozenset({"gather", "scatter", "scatter_", "scatter_add", "scatter_add_", "index_select",
                                 "index_add", "index_add_", "index_copy", "index_copy_", "index_fill", "index_fill_",
                                 "index_put", "index_put_", "masked_fill", "masked_fill_", "masked_scatter",
                                 "take_along_dim", "bucketize"})


def dotted(node: ast.AST) -> str:
    try:
        return ast.unparse(node)[:80]
    except Exception:  # noqa: BLE001 - a name to show, nothing more
        return "?"


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    out = {}
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            out[id(child)] = parent
    return out


def _is_torch(call: ast.Call) -> bool:
    """A torch function or a tensor method: the value stays in torch's hands."""
    fn = call.func
    if isinstance(fn, ast.Attribute) and fn.attr in TENSOR_ONLY_METHODS:
        return True
    root = fn
    while isinstance(root, ast.Attribute):
        root = root.value
    return isinstance(root, ast.Name) and root.id in _TORCH_ROOTS


def _reads_at(tree: ast.AST, line: int) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or n.lineno)
            and call_name(n) in HOST_READS and isinstance(n.func, ast.Attribute) and not n.args]


class _Uses:
    def __init__(self, tree: ast.AST):
        self.tree = tree
        self.parent = _parents(tree)
        self.functions = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def _enclosing_function(self, node: ast.AST):
        while id(node) in self.parent:
            node = self.parent[id(node)]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node
        return None

    def consumer(self, node: ast.AST, depth: int = 0, through_arithmetic: bool = False) -> str | None:
        """The non-torch, non-logging call that needs this value, or None. With `through_arithmetic`, a
        value still counts after arithmetic and inside containers (`json.dumps({"m": total / n})`)."""
        if depth > 3:
            return None
        child, parent = node, self.parent.get(id(node))
        while parent is not None:
            if isinstance(parent, ast.Call) and child is parent.func:  # value.method(): the method's result
                if call_name(parent) not in PASS_THROUGH:
                    return None
                child, parent = parent, self.parent.get(id(parent))
                continue
            if isinstance(parent, ast.Call):
                name = call_name(parent)
                if name in PASS_THROUGH:
                    child, parent = parent, self.parent.get(id(parent))
                    continue
                if name in LOGGING or _is_torch(parent):
                    return None
                return dotted(parent.func)
            if isinstance(parent, ast.Attribute):  # x.cpu().numpy: on to the call of that method
                child, parent = parent, self.parent.get(id(parent))
                continue
            if isinstance(parent, (ast.Tuple, ast.List, ast.Subscript, ast.Starred)) or (
                    through_arithmetic and isinstance(parent, (ast.BinOp, ast.UnaryOp, ast.Dict, ast.Set))):
                child, parent = parent, self.parent.get(id(parent))
                continue
            if isinstance(parent, ast.Return):
                return self._through_callers(parent, depth)
            if isinstance(parent, ast.Assign) and child is parent.value:
                return self._through_names(parent, depth, through_arithmetic)
            return None  # arithmetic, a comparison, a branch test, a format string: the classic sync
        return None

    def _through_names(self, assign: ast.Assign, depth: int, through_arithmetic: bool = False) -> str | None:
        names = {t.id for t in assign.targets if isinstance(t, ast.Name)}
        names |= {e.id for t in assign.targets if isinstance(t, ast.Tuple) for e in t.elts if isinstance(e, ast.Name)}
        scope = self._enclosing_function(assign) or self.tree
        for node in ast.walk(scope):
            if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load) \
                    and node.lineno >= assign.lineno:
                found = self.consumer(node, depth + 1, through_arithmetic)
                if found:
                    return found
        return None

    def _through_callers(self, ret: ast.Return, depth: int) -> str | None:
        function = self._enclosing_function(ret)
        if function is None:
            return None
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and call_name(node) == function.name:
                found = self.consumer(node, depth + 1)
                if found:
                    return found
        return None


def host_consumer(tree: ast.AST, line: int) -> str | None:
    """For the host reads at `line` (`x.item()`, `x.cpu().numpy()`, `x.tolist()`), the code outside torch
    that needs their value (`env.step`), when every read there feeds such code; else None."""
    reads = _reads_at(tree, line)
    if not reads:
        return None
    uses = _Uses(tree)
    consumers = [uses.consumer(r) for r in reads]
    return consumers[0] if all(consumers) else None


def host_table_read(tree: ast.AST, line: int) -> str | None:
    """For a host read at `line` that only indexes a tensor kept on the host (`table.gather(-1, t.cpu())`),
    that call (`table.gather`): the read goes when the table lives on the device; else None."""
    uses = _Uses(tree)
    for read in _reads_at(tree, line):
        child: ast.AST = read
        parent = uses.parent.get(id(read))
        while isinstance(parent, (ast.Attribute, ast.Call)) and (
                isinstance(parent, ast.Attribute) or child is parent.func or call_name(parent) in PASS_THROUGH):
            child, parent = parent, uses.parent.get(id(parent))
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and child is not parent.func \
                and parent.func.attr in TENSOR_ONLY_METHODS and not isinstance(parent.func.value, ast.Call):
            return dotted(parent.func)
    return None


def _sets_key(node: ast.AST, name: str, key: str) -> bool | None:
    """Whether this statement puts `key` into the dict bound to `name` (True), binds `name` to something
    unreadable (None), or neither (False)."""
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id == name:
                value = node.value
                if any(isinstance(n, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == key for k in n.keys)
                       for n in ast.walk(value)):
                    return True
                if any(isinstance(n, ast.Call) and any(kw.arg == key for kw in n.keywords) for n in ast.walk(value)):
                    return True
                if not any(isinstance(n, (ast.Dict, ast.Call)) for n in ast.walk(value)):
                    return None  # bound to something the source does not spell out
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id == name \
                    and isinstance(target.slice, ast.Constant) and target.slice.value == key:
                return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("update", "setdefault") \
            and isinstance(node.func.value, ast.Name) and node.func.value.id == name:
        if any(kw.arg == key for kw in node.keywords):
            return True
        if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == key:
            return True
    return False


def call_requests(tree: ast.AST, line: int, key: str, names: set[str]) -> bool | None:
    """Whether the call of one of `names` at `line` asks for `key` (`fused=...`) on some path: directly,
    or through `**kwargs` that its scope fills with that key (`{"fused": True} if cuda else {}`). None when
    a `**` argument cannot be read (any key may be in it)."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or n.lineno)
             and call_name(n) in names]
    if not calls:
        return None
    call = calls[0]
    if any(kw.arg == key for kw in call.keywords):
        return True
    stars = [kw.value for kw in call.keywords if kw.arg is None]
    if not stars:
        return False
    uses = _Uses(tree)
    scope = uses._enclosing_function(call) or tree
    unknown = False
    for star in stars:
        if not isinstance(star, ast.Name):
            unknown = True
            continue
        verdicts = [_sets_key(n, star.id, key) for n in ast.walk(scope)]
        if True in verdicts:
            return True
        if None in verdicts or not any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == star.id
                                                                          for t in n.targets) for n in ast.walk(scope)):
            unknown = True  # a parameter, or a name bound to something unreadable
    return None if unknown else False


def option_literals(tree: ast.AST, key: str, values: set[str]) -> list[tuple[int, str]]:
    """Where the source sets option `key` to one of `values` as a string literal: a keyword of a call
    (`TrainingArguments(optim="adamw_torch")`) or an entry of a dict literal (a config): (line, value)."""
    found = []
    for node in ast.walk(tree):
        pairs: list[tuple[object, ast.expr]]
        if isinstance(node, ast.Call):
            pairs = [(kw.arg, kw.value) for kw in node.keywords]
        elif isinstance(node, ast.Dict):
            pairs = [(k.value if isinstance(k, ast.Constant) else None, v) for k, v in zip(node.keys, node.values)]
        else:
            continue
        for name, value in pairs:
            if name == key and isinstance(value, ast.Constant) and value.value in values:
                found.append((value.lineno, value.value))
    return sorted(found)
