"""Read the user's source to turn 'this op ran inside function f' into exact lines.

Kineto records the function a frame belongs to, not the line that was running. Inside that function
the call that produced the op has a known shape (`.item()`, `print(t)`, `if t > 0:`), so the AST of
the function gives its line. Nested functions and classes are not searched: they are frames of
their own.
"""
from __future__ import annotations

import ast
import importlib.util
import os
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .calls import SCALAR_READ_CALLS, call_name, creates_on_host, literal, literal_kwargs, makes_mask

_FORMAT_VIAS = {"__format__", "__repr__", "__str__", "_str", "_tensor_str"}
_FORMAT_CALLS = {"print", "format", "str", "repr"}


@dataclass(frozen=True, slots=True)
class CallSite:
    line: int
    name: str
    code: str
    kwargs: dict = field(default_factory=dict, hash=False, compare=False)  # literal keyword values
    call: str = field(default="", hash=False, compare=False)              # the call expression
    in_loop: bool = field(default=False, hash=False, compare=False)       # inside a for/while body
    receiver: str = field(default="", hash=False, compare=False)          # `x` in `x.to(device)`
    end_line: int = field(default=0, hash=False, compare=False)           # last line of a multi-line call


@lru_cache(maxsize=64)
def library_names(path: str | None) -> frozenset[str]:
    """The public classes and functions a library's Python file defines at its top level (`Normal` for
    torch/distributions/normal.py), read from the installed package: what a user's line calls into it when the
    profiler names only the frame below (`__init__`, a decorator's `_no_grad_wrapper`). Empty when the file is
    not found here."""
    path = (path or "").replace("\\", "/")
    if not path.endswith(".py") or "/../" in f"/{path}":
        return frozenset()
    if not os.path.isabs(path):
        top, _, rest = path.partition("/")
        try:  # the package's folder, without importing it
            spec = importlib.util.find_spec(top) if top.isidentifier() and rest else None
        except (ImportError, ValueError):
            spec = None
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        path = next((os.path.join(f, rest) for f in folders if os.path.isfile(os.path.join(f, rest))), "")
    parsed = _parse(path) if path and os.path.isfile(path) else None
    if parsed is None:
        return frozenset()
    return frozenset(node.name for node in parsed[0].body
                     if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                     and not node.name.startswith("_"))


@lru_cache(maxsize=256)
def _parse(path: str) -> tuple[ast.Module, list[str]] | None:
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            text = f.read()
        return ast.parse(text), text.splitlines()
    except (OSError, SyntaxError, ValueError):
        return None


def _walk_own(nodes):
    """(node, in_loop) for statements, without entering nested functions, classes or lambdas."""
    stack = [(n, False) for n in reversed(nodes)]
    while stack:
        node, in_loop = stack.pop()
        yield node, in_loop
        loop = isinstance(node, (ast.For, ast.AsyncFor, ast.While))
        for child in reversed(list(ast.iter_child_nodes(node))):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                stack.append((child, in_loop or (loop and child not in (getattr(node, "iter", None),))))


_COMPREHENSIONS: dict[str, type[ast.expr]] = {"<listcomp>": ast.ListComp, "<setcomp>": ast.SetComp, "<dictcomp>": ast.DictComp,
                   "<genexpr>": ast.GeneratorExp, "<lambda>": ast.Lambda}


_MOVES = {"to", "cuda", "cpu", "train", "eval", "float", "half", "bfloat16", "double", "requires_grad_"}
# tensor methods whose result is a boolean mask
def _built(value) -> str | None:
    """The name called to build the value, through the moves after it (`nn.Sequential(…).to(device).train()`)."""
    while (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
           and value.func.attr in _MOVES and isinstance(value.func.value, ast.Call)):
        value = value.func.value
    return call_name(value) if isinstance(value, ast.Call) else None


def _function_body(module: ast.Module, line: int, func: str) -> list | None:
    """The statements of the function `func` that the profiler named by `line`. Kineto names a frame by
    its def line, except a frame already running when recording started: that one carries the line it
    was on. So: the function defined at `line`, else the innermost one named `func` that spans it.
    Comprehensions and lambdas are frames of their own (`<listcomp>`): the expression at that line."""
    kind = _COMPREHENSIONS.get(func)
    spanning: list[Any] = []
    for node in ast.walk(module):
        if kind is not None:
            if isinstance(node, kind) and node.lineno <= line <= (node.end_lineno or node.lineno):
                spanning.append(node)
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if line in (first, node.lineno):
                return node.body
            if first <= line <= (node.end_lineno or node.lineno):
                spanning.append(node)
    if not spanning:
        return None
    inner = max(spanning, key=lambda n: (n.lineno, -(n.end_lineno or n.lineno)))
    return [inner] if kind is not None else inner.body


class SourceIndex:
    """Source files of the user's code, found through the roots a run or trace gives."""

    def __init__(self, roots: tuple[str, ...] = (), aliases: dict[str, str] | None = None,
                 executed: list[dict] | None = None, trusted: tuple[str, ...] | None = None):
        self.roots = tuple(r for r in roots if r)
        # files are read only under these folders (the project, the script's folder, --source-root): a
        # trace from someone else names local files, and their lines must not end up in a report
        self.trusted = tuple(os.path.realpath(r) for r in (trusted if trusted is not None else self.roots) if r)
        self.aliases = dict(aliases or {})  # ASCII link -> real path (scripts with non-ASCII paths)
        # lines that ran in a step of the run and how often, by file (from the probes; empty for a
        # foreign trace)
        self.executed: dict[str, dict[int, int]] = {}
        for entry in executed or ():
            lines = self.executed.setdefault(self.unalias(entry["path"]), {})
            lines[entry["line"]] = lines.get(entry["line"], 0) + int(entry.get("count") or 1)
        self._module_names: dict[tuple[str, str], frozenset[str]] = {}  # a whole file's walk, asked per op
        self._assignments: dict[tuple[str, int, str], dict[str, list[str]]] = {}  # a function's, asked per move
        self._calls: dict[tuple, list[CallSite] | None] = {}  # a function's calls of some names, asked per op

    def _ran(self, path: str, sites: list[CallSite]) -> list[CallSite]:
        """The sites whose lines ran in the traced step; all of them when that is not known (a foreign
        trace, or a file that did not run in that step)."""
        lines = self.executed.get(self.resolve(path) or self.unalias(path))
        if not lines:
            return sites
        ran = [s for s in sites if s.line in lines or s.end_line in lines]
        return ran or sites

    def times_run(self, path: str, line: int) -> int | None:
        """How often a line ran in the traced warm-up step, or None when that is not known."""
        lines = self.executed.get(self.resolve(path) or self.unalias(path))
        return lines.get(line, 0) if lines else None

    def tree(self, path: str) -> ast.Module | None:
        parsed = self._parsed(path)
        return parsed[0] if parsed else None

    def unalias(self, path: str) -> str:
        for alias, real in self.aliases.items():
            if path == alias or path.startswith(alias + os.sep):
                return real + path[len(alias):]
        return path

    def resolve(self, path: str) -> str | None:
        """The local file a trace's path names, when it is under a trusted folder; else None."""
        path = self.unalias(path)
        if os.path.isabs(path):
            return path if os.path.isfile(path) and self.trusts(path) else None
        for root in self.roots:
            candidate = os.path.join(self.unalias(root), path)  # a recorded root, moved (facts.registry)
            if os.path.isfile(candidate) and self.trusts(candidate):
                return os.path.abspath(candidate)
        return None

    def trusts(self, path: str) -> bool:
        real = os.path.realpath(path)
        return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in self.trusted)

    def _parsed(self, path: str):
        resolved = self.resolve(path)
        return _parse(resolved) if resolved else None

    def display_path(self, path: str) -> str:
        """The path as the user knows it: relative to the working directory when inside it."""
        resolved = self.resolve(path) or self.unalias(path)
        try:
            rel = os.path.relpath(resolved)
        except ValueError:
            return resolved
        return rel if not rel.startswith("..") else resolved

    def attribute_assignments(self, path: str, dotted: str) -> list[tuple[int, object]]:
        """(line, literal value) of every assignment to an attribute path ending in `dotted`
        (`torch.backends.cudnn.benchmark = True` for "cudnn.benchmark"), anywhere in the file."""
        parsed = self._parsed(path)
        if parsed is None:
            return []
        out = []
        for node in ast.walk(parsed[0]):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and ast.unparse(target).endswith(dotted):
                        out.append((node.lineno, literal(node.value)))
        return sorted(out, key=lambda item: item[0])

    def enclosing_block_line(self, path: str, line: int) -> int:
        """The first line of the outermost `if`/`with`/`try` block holding `line` within its function (the
        statement at that function's own level), or `line` itself when it is at that level."""
        parsed = self._parsed(path)
        if parsed is None:
            return line
        best = line
        scopes = [parsed[0]] + [n for n in ast.walk(parsed[0]) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for scope in scopes:
            for stmt in scope.body:
                if stmt.lineno <= line <= stmt.end_lineno and isinstance(stmt, (ast.If, ast.With, ast.Try)):
                    best = stmt.lineno
        return best

    def host_iteration_lines(self, path: str) -> set[int]:
        """Lines that iterate over a tensor the same function created on the host
        (`ix = torch.randint(...)`; `[data[i:i + n] for i in ix]`): indexing with its elements reads
        host values, a sync on no device."""
        parsed = self._parsed(path)
        if parsed is None:
            return set()
        lines: set[int] = set()
        scopes = [parsed[0]] + [n for n in ast.walk(parsed[0]) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for scope in scopes:
            body = scope.body
            host = {t.id for node, _ in _walk_own(body) if isinstance(node, ast.Assign) and creates_on_host(node.value)
                    for t in node.targets if isinstance(t, ast.Name)}
            if not host:
                continue
            for node, _ in _walk_own(body):
                generators = getattr(node, "generators", None)
                if generators and any(isinstance(g.iter, ast.Name) and g.iter.id in host for g in generators):
                    lines.update(range(node.lineno, node.end_lineno + 1))
                elif isinstance(node, ast.For) and isinstance(node.iter, ast.Name) and node.iter.id in host:
                    lines.update(range(node.body[0].lineno, (node.body[-1].end_lineno or node.body[-1].lineno) + 1))
        return lines

    def module_names(self, path: str, cls: str) -> set[str]:
        """Names the file binds to instances of the module class `cls` (`encoder = nn.TransformerEncoder(…)`,
        `self.encoder = …`, `model = nn.Sequential(…).to(device)`), so that `encoder(x)` and
        `self.encoder(x)` are found as calls of it."""
        key = (path, cls)
        if key not in self._module_names:
            self._module_names[key] = frozenset(self._bound_to(path, cls))
        return set(self._module_names[key])

    def _bound_to(self, path: str, cls: str) -> set[str]:
        parsed = self._parsed(path)
        nodes = list(ast.walk(parsed[0])) if parsed else []
        # the file's own functions that return one (`def make_model(): return nn.Sequential(…)`)
        makers = {cls} | {f.name for f in nodes if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                          and any(isinstance(r, ast.Return) and _built(r.value) == cls for r in ast.walk(f))}
        names = set()
        for node in nodes:
            if not isinstance(node, ast.Assign):
                continue
            if _built(node.value) in makers:
                for target in node.targets:
                    if isinstance(target, (ast.Name, ast.Attribute)):
                        names.add(target.id if isinstance(target, ast.Name) else target.attr)
        return names

    def text(self, path: str) -> str:
        """A source file's whole text ("" when it cannot be read)."""
        parsed = self._parsed(path)
        return "\n".join(parsed[1]) if parsed else ""

    def line_text(self, path: str, line: int) -> str:
        parsed = self._parsed(path)
        if parsed and 0 < line <= len(parsed[1]):
            return parsed[1][line - 1].strip()
        return ""

    def _body(self, path: str, def_line: int, func: str):
        resolved = self.resolve(path)
        parsed = _parse(resolved) if resolved else None
        if parsed is None:
            return None, []
        module, lines = parsed
        if func == "<module>":
            return lines, module.body
        return lines, _function_body(module, def_line, func)

    def function_lines(self, path: str, def_line: int, func: str) -> range | None:
        """The lines of the function the profiler named (`def_line`, `func`); None without its source."""
        lines, body = self._body(path, def_line, func)
        if not body:
            return None
        if func == "<module>":
            return range(1, len(lines) + 1)
        return range(body[0].lineno, max(s.end_lineno or s.lineno for s in body) + 1)

    def calls(self, path: str, def_line: int, func: str, names: set[str],
              bare: frozenset[str] = frozenset()) -> list[CallSite] | None:
        """Calls named in `names` inside the function (those in `bare` only as `name(...)`, not as a method);
        None when the source is not available."""
        key = (path, def_line, func, frozenset(names), bare)
        found = self._calls[key] if key in self._calls else self._calls.setdefault(key, self._find_calls(*key))
        return None if found is None else list(found)

    def _find_calls(self, path: str, def_line: int, func: str, names: frozenset[str], bare: frozenset[str]):
        lines, body = self._body(path, def_line, func)
        if body is None:
            return None
        sites = []
        for node, in_loop in _walk_own(body):
            if isinstance(node, ast.Call) and call_name(node) in names and not (
                    isinstance(node.func, ast.Attribute) and node.func.attr in bare):
                receiver = ast.unparse(node.func.value)[:200] if isinstance(node.func, ast.Attribute) else ""
                sites.append(CallSite(node.lineno, call_name(node) or "", lines[node.lineno - 1].strip(),
                                      literal_kwargs(node), ast.unparse(node)[:200], in_loop, receiver,
                                      node.end_lineno or node.lineno))
            elif isinstance(node, ast.JoinedStr) and "<f-string>" in names:
                sites.append(CallSite(node.lineno, "<f-string>", lines[node.lineno - 1].strip(), in_loop=in_loop,
                                      end_line=node.end_lineno or node.lineno))
        # work repeated every step runs in a loop: when the function has a loop, prefer its calls
        looped = [s for s in sites if s.in_loop]
        return sorted(set(self._ran(path, looped or sites)), key=lambda s: s.line)

    def assignments(self, path: str, def_line: int, func: str) -> dict[str, list[str]]:
        """name -> the expressions assigned to it in the function (to follow `x = …; x.to(d)`): made once per
        function (asked for each move of each step)."""
        key = (path, def_line, func)
        if key not in self._assignments:
            _, body = self._body(path, def_line, func)
            out: dict[str, list[str]] = {}
            for node, _ in _walk_own(body or []):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            out.setdefault(target.id, []).append(ast.unparse(node.value)[:200])
            self._assignments[key] = out
        return {name: list(values) for name, values in self._assignments[key].items()}

    def branches(self, path: str, def_line: int, func: str) -> list[CallSite]:
        """`if`/`while`/`assert`/ternary tests that compare or call: candidates for bool(tensor)."""
        lines, body = self._body(path, def_line, func)
        sites = []
        for node, in_loop in _walk_own(body or []):
            if isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)):
                test = node.test
                if any(isinstance(n, (ast.Compare, ast.Call, ast.Attribute, ast.Subscript)) for n in ast.walk(test)):
                    sites.append(CallSite(test.lineno, type(node).__name__.lower(), lines[test.lineno - 1].strip(),
                                          end_line=test.end_lineno or test.lineno,
                                          in_loop=in_loop))
        looped = [s for s in sites if s.in_loop]
        return sorted(set(self._ran(path, looped or sites)), key=lambda s: s.line)

    def masks(self, path: str, def_line: int, func: str) -> list[CallSite]:
        """Boolean-mask indexing, read (`x[x > 0]`, `w[mask, None]`) or written (`out[mask] = v`): the result's
        size, or the indices written, are only known on the device. A mask is a comparison, `~`, `&`, `|` or a
        boolean method written in the index, or a name the function assigns one to (`mask = idx == e`)."""
        lines, body = self._body(path, def_line, func)
        nodes = list(_walk_own(body or []))
        named = {t.id for node, _ in nodes if isinstance(node, ast.Assign) and makes_mask(node.value)
                 for t in node.targets if isinstance(t, ast.Name)}
        sites = []
        for node, in_loop in nodes:
            if isinstance(node, ast.Subscript) and any(
                    makes_mask(i) or (isinstance(i, ast.Name) and i.id in named)
                    for i in (node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice])):
                sites.append(CallSite(node.lineno, "mask", lines[node.lineno - 1].strip(), in_loop=in_loop,
                                      end_line=node.end_lineno or node.lineno))
        looped = [s for s in sites if s.in_loop]
        return sorted(set(self._ran(path, looped or sites)), key=lambda s: s.line)

    def locate(self, path: str, def_line: int, func: str, via: str | None,
               fallback: Collection[str] = frozenset(), forms: tuple[str, ...] = (),
               via_path: str | None = None) -> tuple[list[CallSite], bool]:
        """Lines in the function that match the call `via`, else (a class's `__init__`, a decorator's wrapper:
        names the user's code does not call) the public names the library file `via_path` defines; when the
        op came from C with no Python call of its own (via is None), the `fallback` call names, then the
        syntactic `forms` ("branch": if/while tests, "mask": boolean-mask indexing). Returns (sites, exact);
        when nothing matches, the function's own line, not exact."""
        if via and via.startswith("module:"):  # torch's code running for a module the user called
            searches = [self.module_names(path, via.split(":", 1)[1])]
        elif via in _FORMAT_VIAS:
            searches = [({"print", "<f-string>"} | _FORMAT_CALLS)]
        elif via:
            searches = [{via}, set(library_names(via_path))] if via_path else [{via}]
        else:
            searches = [set(fallback)] if fallback else []
        for candidates in searches:
            # float(t), int(t), bool(t) read a value as builtins; as methods (`mask.float()`) they are casts
            sites = self.calls(path, def_line, func, candidates, bare=frozenset() if via else SCALAR_READ_CALLS)
            if sites:
                return sites, True
        if via is None:
            for form in forms:
                sites = self.branches(path, def_line, func) if form == "branch" else self.masks(path, def_line, func)
                if sites:
                    return sites, True
        return [CallSite(def_line, func, self.line_text(path, def_line))], False
