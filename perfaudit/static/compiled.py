"""T25: what the source alone shows about torch.compile: a call inside a function that `torch.compile`
compiles and that dynamo cannot trace, so the graph breaks there on every call. Certain cases only:
the function is decorated with `@torch.compile`, passed by name to `torch.compile(fn)`, or is the
`forward` of a class whose instance is compiled (`torch.compile(Net())`, `model = Net(); model =
torch.compile(model)`, `model.compile()`)."""
from __future__ import annotations

import ast

from ..calls import call_name
from .registry import Hit

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# host reads dynamo does not capture (`.item()` is captured when capture_scalar_outputs is on)
_BREAKING_METHODS = {"item": "`.item()`", "tolist": "`.tolist()`", "numpy": "`.numpy()`"}


def _is_compile(node) -> bool:
    """`torch.compile` or a bare `compile` imported from torch."""
    target = node.func if isinstance(node, ast.Call) else node
    return (isinstance(target, ast.Attribute) and target.attr == "compile" and isinstance(target.value, ast.Name)
            and target.value.id == "torch")


def _compiled_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """Names of module functions and of classes whose instances torch.compile compiles."""
    functions, classes = set(), set()
    built: dict[str, str] = {}  # variable -> class it was built from (`model = Net(...)`)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    built[target.id] = node.value.func.id
    for node in ast.walk(tree):
        if isinstance(node, _FUNCTIONS):
            if any(_is_compile(d) for d in node.decorator_list):
                functions.add(node.name)
        elif isinstance(node, ast.Call) and _is_compile(node) and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Name):
                functions.add(arg.id)
                if arg.id in built:
                    classes.add(built[arg.id])
            elif isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name):
                classes.add(arg.func.id)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compile"
              and isinstance(node.func.value, ast.Name) and node.func.value.id in built):
            classes.add(built[node.func.value.id])  # model.compile()
    return functions, classes


def _captures_scalars(tree: ast.AST) -> bool:
    """`torch._dynamo.config.capture_scalar_outputs = True` somewhere in the module."""
    return any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "capture_scalar_outputs"
                                                  for t in n.targets) for n in ast.walk(tree))


def _calls_in(body) -> list[ast.Call]:
    """Calls in these statements, not in nested functions or classes (those are compiled only if called)."""
    out, stack = [], list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call):
            out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def graph_breaks_in_compiled(tree: ast.AST) -> list[Hit]:
    functions, classes = _compiled_names(tree)
    if not functions and not classes:
        return []
    targets = [n for n in getattr(tree, "body", ()) if isinstance(n, _FUNCTIONS) and n.name in functions]
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name in classes):
        targets += [n for n in cls.body if isinstance(n, _FUNCTIONS) and n.name == "forward"]
    captures = _captures_scalars(tree)
    hits = []
    for fn in targets:
        for call in _calls_in(fn.body):
            name = call_name(call)
            what = None
            if name == "print" and isinstance(call.func, ast.Name):
                what = "`print`"
            elif name in _BREAKING_METHODS and isinstance(call.func, ast.Attribute) and not call.args:
                what = None if (name == "item" and captures) else _BREAKING_METHODS[name]
            if what:
                hits.append(Hit("COMPILE001", call.lineno,
                                f"{what} inside `{fn.name}`, which torch.compile compiles: a graph break on every call"))
    return hits
