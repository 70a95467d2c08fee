"""The house's structure, checked: every import of every module (at the top and inside functions)
goes down the layers or stays in its own, and no set of modules imports itself round in a circle.
The layers are declared here once, lowest first; docs/architecture.md explains them."""
from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "perfaudit"

# lowest first; a module belongs to the first entry its dotted name starts with
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("vocabulary", ("perfaudit.errors", "perfaudit.files", "perfaudit.outcome", "perfaudit.calls", "perfaudit.tips",
                    "perfaudit.probe_schema", "perfaudit.untrusted")),
    ("collection", ("perfaudit.collect",)),
    ("trace model", ("perfaudit.trace", "perfaudit.source", "perfaudit.findings")),
    ("projection model", ("perfaudit.projection",)),
    ("facts", ("perfaudit.facts", "perfaudit.static", "perfaudit.flops")),
    ("rule engine", ("perfaudit.engine", "perfaudit.fix", "perfaudit.policy", "perfaudit.verify")),
    ("reporters", ("perfaudit.report",)),
    ("use cases", ("perfaudit.usecases",)),
    ("library API", ("perfaudit.api",)),
    ("entry points", ("perfaudit.cli", "perfaudit.child", "perfaudit.launch", "perfaudit.__main__",
                      "perfaudit.integrations", "perfaudit.mcp")),
]
# imports allowed to run up, each with its reason
ENTRY_HOOKS = {
    ("perfaudit", "perfaudit.integrations.magics"):
        "IPython's `%load_ext perfaudit` looks for load_ipython_extension on the package itself",
}
MAX_LINES = 400  # a longer module says why in its docstring ("long because …")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts)


def _layer(module: str) -> int | None:
    if module == "perfaudit":  # the package's face: its version
        return 0
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if is_package else 0)
        base = ".".join(parts[:keep] + ([node.module] if node.module else []))
    out = []
    for alias in node.names:
        candidate = f"{base}.{alias.name}"
        out.append(candidate if _exists(candidate) else base)
    return out


def _exists(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports() -> dict[str, set[str]]:
    """Every perfaudit module -> the perfaudit modules it imports anywhere in its body."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        is_package = path.name == "__init__.py"
        if is_package:
            module = module.rsplit(".__init__", 1)[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                targets.update(t for t in _resolve(module, is_package, node) if t.startswith("perfaudit"))
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.startswith("perfaudit"))
        graph[module] = {t for t in targets if t != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _package_of(module: str, graph: dict[str, set[str]]) -> bool:
    return any(m.startswith(module + ".") for m in graph)


def test_every_module_has_a_layer():
    graph = imports()
    assert not [m for m in graph if _layer(m) is None], "declare the new module's layer in LAYERS"


def test_no_import_cycles_function_level_imports_included():
    graph = imports()
    # a package's __init__ re-exporting its own modules is not a cycle between layers
    graph = {m: {t for t in ts if not (_package_of(m, graph) and t.startswith(m + "."))} for m, ts in graph.items()}
    assert not _cycles(graph), _cycles(graph)


def test_no_import_runs_up_the_layers():
    upward = []
    for module, targets in imports().items():
        for target in targets:
            low, high = _layer(module), _layer(target)
            if low is not None and high is not None and high > low and (module, target) not in ENTRY_HOOKS:
                upward.append(f"{module} ({LAYERS[low][0]}) imports {target} ({LAYERS[high][0]})")
    assert not upward, "\n".join(sorted(upward))


def test_long_modules_say_why():
    long = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "long because" not in doc.lower():
                long.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
    assert not long, long


def test_the_cli_is_a_skin_over_the_api():
    """Commands parse options, call one API function and render: the CLI (and the MCP server, the same skin
    for agents, which `perfaudit mcp` starts) imports the facade, the reporters and the option types, never
    the use cases, the engine or the collection directly."""
    allowed = ("perfaudit.api", "perfaudit.report", "perfaudit.errors", "perfaudit.cli", "perfaudit.mcp")
    skins = [m for m in imports() if m in ("perfaudit.cli", "perfaudit.mcp") or m.startswith("perfaudit.cli.")]
    direct = sorted(f"{m} imports {t}" for m in skins for t in imports()[m]
                    if t != "perfaudit" and not any(t == a or t.startswith(a + ".") for a in allowed))
    assert not direct, direct


MAX_ROOM_MODULES = 16   # a folder holding more modules than this (its __init__ and __main__ aside) ...
MAX_ROOM_LINES = 2000   # ... or more lines than this is split into sub-rooms (collect/window, facts/gpu, ...)


def test_rooms_stay_small():
    """A reader finds a piece by its room's name, not by reading every file name of a flat folder."""
    big = []
    for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        modules = [p for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
        lines = sum(p.read_text(encoding="utf-8").count("\n") for p in modules)
        if len(modules) > MAX_ROOM_MODULES or lines > MAX_ROOM_LINES:
            big.append(f"{folder.relative_to(ROOT)}: {len(modules)} modules, {lines} lines")
    assert not big, big
