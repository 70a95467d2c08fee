"""`perfaudit lint`: what the source alone shows, in milliseconds per file and without importing torch.

Each check reports under the rule id whose runtime evidence would confirm it; the rule file gives the
severity and the fix. Checks look at training loops (for/while bodies) where per-step cost matters,
and skip logging branches (`if step % 100 == 0:`).
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from .errors import UsageError
from .findings import Cost, Finding, Location

_SYNC_METHODS = {"item", "cpu", "numpy", "tolist"}
_CREATION = {"randn", "rand", "randint", "zeros", "ones", "empty", "full", "arange", "linspace", "eye", "tensor"}
_OPTIMIZERS = {"Adam", "AdamW", "SGD", "Adagrad", "RMSprop", "NAdam", "RAdam", "Adamax", "Adadelta"}


@dataclass
class Hit:
    rule: str
    line: int
    message: str


def _name(node) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _kw(call: ast.Call, key: str):
    for kw in call.keywords:
        if kw.arg == key:
            try:
                return ast.literal_eval(kw.value)
            except (ValueError, SyntaxError, TypeError):
                return ...
    return None


def _is_creation(node) -> bool:
    return (isinstance(node, ast.Call) and _name(node.func) in _CREATION and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch" and _kw(node, "device") is None)


def _steps_here(body) -> bool:
    """Whether these statements call backward() or .step() outside any nested loop or function."""
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor, ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call) and _name(node.func) in ("backward", "step"):
            return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def _logging_branch(test) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(test))


class _Checker(ast.NodeVisitor):
    def __init__(self):
        self.hits: list[Hit] = []
        self.loop = 0
        self.step = [False]  # innermost loop or function: is its body one training step?
        self.logging = 0
        self.host_vars: set[str] = set()  # names bound to tensors made on the host in this scope

    # -- context -------------------------------------------------------------------------------
    def _loop(self, node):
        self.loop += 1
        self.step.append(_steps_here(node.body))
        self.generic_visit(node)
        self.step.pop()
        self.loop -= 1

    visit_For = visit_While = visit_AsyncFor = _loop

    def visit_If(self, node):
        logging = self.loop and _logging_branch(node.test)
        self.visit(node.test)
        self.logging += logging
        for child in node.body:
            self.visit(child)
        self.logging -= logging
        for child in node.orelse:
            self.visit(child)

    def visit_FunctionDef(self, node):
        outer = (self.loop, self.logging, self.host_vars)
        self.loop, self.logging, self.host_vars = 0, 0, set()
        self.step.append(_steps_here(node.body))  # a train_step() function: its body runs every step
        self.generic_visit(node)
        self.step.pop()
        self.loop, self.logging, self.host_vars = outer
        if node.name == "__init__":
            self._layers_then_norm(node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node):
        if _is_creation(node.value):
            self.host_vars.update(t.id for t in node.targets if isinstance(t, ast.Name))
        self.generic_visit(node)

    # -- checks --------------------------------------------------------------------------------
    def _hit(self, rule, node, message):
        self.hits.append(Hit(rule, node.lineno, message))

    def visit_Call(self, node):
        name = _name(node.func)
        in_step = self.step[-1] and not self.logging
        if in_step and name in _SYNC_METHODS and isinstance(node.func, ast.Attribute) and not node.args:
            self._hit("SYNC001", node, f"`.{name}()` inside the training loop copies to the host and syncs every step")
        if in_step and name == "synchronize":
            self._hit("SYNC001", node, "`torch.cuda.synchronize()` inside the training loop blocks every step")
        if name == "zero_grad" and _kw(node, "set_to_none") is False:
            self._hit("GRAD001", node, "`zero_grad(set_to_none=False)` zero-fills every gradient each step")
        if name in ("zero_", "fill_") and isinstance(node.func, ast.Attribute) and "grad" in ast.unparse(node.func.value):
            self._hit("GRAD001", node, f"`{ast.unparse(node.func)}()` zero-fills a gradient; set it to None")
        if name == "set_detect_anomaly" and node.args and _literal(node.args[0]) is True or name == "detect_anomaly":
            self._hit("DEBUG001", node, "anomaly detection is turned on")
        if name == "emit_nvtx" or (name in ("gradcheck", "gradgradcheck") and self.loop):
            self._hit("DEBUG001", node, f"`{name}` is a debugging API")
        if name == "DataParallel":
            self._hit("DIST001", node, "`nn.DataParallel`: use DistributedDataParallel")
        if name == "empty_cache" and in_step:
            self._hit("MEM001", node, "`torch.cuda.empty_cache()` inside the training loop")
        if name == "DataLoader" and _kw(node, "num_workers") in (None, 0):
            self._hit("DATA001", node, "DataLoader without workers (num_workers=0): batches load in the training process")
        if name in _OPTIMIZERS and (_kw(node, "foreach") is False or _kw(node, "fused") is False) \
                and _kw(node, "fused") is not True:
            self._hit("OPT001", node, f"`{name}(..., foreach=False)` runs the per-parameter loop")
        if name in ("cuda", "to") and in_step and isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            moved = name == "cuda" or any("device" in ast.unparse(a) or "cuda" in ast.unparse(a) for a in node.args)
            if moved and (_is_creation(receiver) or (isinstance(receiver, ast.Name) and receiver.id in self.host_vars)):
                self._hit("COPY002", node, f"`{ast.unparse(node)}` creates on the host, then copies to the device")
        if name == "Sequential":
            self._sequence_then_norm(node.args)
        self.generic_visit(node)

    def _layers_then_norm(self, body):
        """In __init__: `self.conv = nn.Conv2d(...)` (bias on) directly followed by `self.bn = BatchNorm…`."""
        calls = [s.value for s in body if isinstance(s, ast.Assign) and isinstance(s.value, ast.Call)]
        self._sequence_then_norm(calls)

    def _sequence_then_norm(self, calls):
        for layer, norm in zip(calls, calls[1:]):
            if not (isinstance(layer, ast.Call) and isinstance(norm, ast.Call)):
                continue
            lname, nname = _name(layer.func) or "", _name(norm.func) or ""
            if (lname.startswith("Conv") or lname == "Linear") and nname.startswith("BatchNorm") \
                    and _kw(layer, "bias") is not False:
                self._hit("BN001", layer, f"`{lname}` with bias=True feeds `{nname}`, which cancels the bias")


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def lint_source(text: str, path: str) -> list[Hit]:
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise UsageError(f"syntax error in {path}:{exc.lineno}: {exc.msg}") from exc
    checker = _Checker()
    checker.visit(tree)
    return sorted({(h.rule, h.line): h for h in checker.hits}.values(), key=lambda h: (h.line, h.rule))


def python_files(paths: list[str]) -> list[str]:
    out = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "venv"))
                out += [os.path.join(root, f) for f in sorted(files) if f.endswith(".py")]
        elif os.path.isfile(path):
            out.append(path)
        else:
            raise UsageError(f"not found: {path}")
    return out


def lint(paths: list[str], rules: list) -> list[Finding]:
    """Static findings for the given files or directories, under the rules that are selected."""
    from .gate import static_fix
    spec = {r.id: r for r in rules}
    findings = []
    for path in python_files(paths):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
        lines = text.splitlines()
        shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
        for hit in lint_source(text, path):
            rule = spec.get(hit.rule)
            if rule is None:
                continue
            code = lines[hit.line - 1].strip() if hit.line <= len(lines) else ""
            findings.append(Finding(rule.id, rule.title, tuple(rule.tips), rule.severity, hit.message, static_fix(rule),
                                    Cost(None, None), (Location(shown, hit.line, code, "static"),),
                                    ("static: seen in the source; `perfaudit run` measures it",),
                                    evidence={"static": True}))
    return findings
