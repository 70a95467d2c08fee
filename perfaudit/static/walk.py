"""Walk a module's AST once, keeping the scope, and run the registered checks on every node."""
from __future__ import annotations

import ast

from ..calls import call_name, creates_on_host, dict_literal, has_star_kwargs, literal, literal_kwargs
from .compiled import graph_breaks_in_compiled
from .debug import memory_history_left_on
from .registry import CHECKS, Hit, Scope
from .sync import needed_reads_left_out

_LOOPS = (ast.For, ast.While, ast.AsyncFor)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# a comprehension is a loop of its own: a training step called in one is not this body's step
_OWN_SCOPE = (*_LOOPS, *_FUNCTIONS, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
              ast.GeneratorExp)


_STEP_CALLS = frozenset({"backward", "step"})


def steps_here(body, trainers: frozenset = _STEP_CALLS) -> bool:
    """Whether these statements call backward() or .step() (or a function of the module that does)
    outside any nested loop or function."""
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, _OWN_SCOPE):
            continue
        if isinstance(node, ast.Call) and call_name(node) in trainers:
            return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def training_functions(tree: ast.AST) -> frozenset:
    """backward/step, and the names of the module's functions that call them, directly or through
    each other (`def backward_step(loss): loss.backward(); opt.step()`): a loop calling one of
    these runs a training step."""
    functions = [n for n in ast.walk(tree) if isinstance(n, _FUNCTIONS)]
    names = set(_STEP_CALLS)
    changed = True
    while changed:
        changed = False
        for fn in functions:
            if fn.name not in names and steps_here(fn.body, frozenset(names)):
                names.add(fn.name)
                changed = True
    return frozenset(names)


def logging_branch(test) -> bool:
    """`if step % 100 == 0:` and the like: taken once every N steps."""
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(test))


class Walker(ast.NodeVisitor):
    def __init__(self, trainers: frozenset = _STEP_CALLS):
        self.scope = Scope()
        self.hits: list[Hit] = []
        self.trainers = trainers

    def visit(self, node):
        for spec in CHECKS.get(type(node), ()):
            self.hits.extend(spec.fn(node, self.scope))
        return super().visit(node)

    def _loop(self, node):
        scope = self.scope
        scope.loops += 1
        scope.steps.append(steps_here(node.body, self.trainers))
        self.generic_visit(node)
        scope.steps.pop()
        scope.loops -= 1

    visit_For = visit_While = visit_AsyncFor = _loop

    def visit_If(self, node):
        logging = bool(self.scope.loops and logging_branch(node.test))
        self.visit(node.test)
        self.scope.logging += logging
        for child in node.body:
            self.visit(child)
        self.scope.logging -= logging
        for child in node.orelse:
            self.visit(child)

    def visit_FunctionDef(self, node):
        outer, self.scope = self.scope, Scope(steps=[steps_here(node.body, self.trainers)])  # a train_step()
        self.generic_visit(node)
        self.scope = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node):
        if creates_on_host(node.value):
            self.scope.host_vars.update(t.id for t in node.targets if isinstance(t, ast.Name))
        spelled = dict_literal(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name):
                self.scope.dicts[target.id] = spelled
            elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                    and self.scope.dicts.get(target.value.id) is not None:
                key = literal(target.slice)  # kwargs["num_workers"] = 4
                if isinstance(key, str):
                    self.scope.dicts[target.value.id][key] = literal(node.value)
                else:
                    self.scope.dicts[target.value.id] = None
        self.generic_visit(node)

    def visit_Call(self, node):
        fn = node.func  # kwargs.update(num_workers=4)
        if isinstance(fn, ast.Attribute) and fn.attr == "update" and isinstance(fn.value, ast.Name) \
                and self.scope.dicts.get(fn.value.id) is not None:
            extra = literal_kwargs(node) if not node.args else None
            if extra is None or has_star_kwargs(node):
                self.scope.dicts[fn.value.id] = None
            else:
                self.scope.dicts[fn.value.id].update(extra)
        self.generic_visit(node)


def check_tree(tree: ast.AST) -> list[Hit]:
    walker = Walker(training_functions(tree))
    walker.visit(tree)
    walker.hits += graph_breaks_in_compiled(tree)  # needs the whole module: which functions are compiled
    walker.hits += memory_history_left_on(tree)  # and whether the history is turned off anywhere in it
    walker.hits = needed_reads_left_out(tree, walker.hits)
    return sorted({(h.rule, h.line): h for h in walker.hits}.values(), key=lambda h: (h.line, h.rule))
