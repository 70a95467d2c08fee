"""How a script is told to take its GPU branch, when its own code says: an argparse flag (`--cuda`,
`--gpu`, `--use-cuda`, `--accel`), a `--device` option whose default is the CPU, a `--no-cuda` flag,
or a framework's accelerator argument. Read with `ast` (no import of the script)."""
from __future__ import annotations

import ast
import os
import re

from .cuda_path import _local_modules, _read

_ON = re.compile(r"^--?(?:use[-_]?)?(?:cuda|gpu|gpus|accel|accelerate|accelerator)$", re.I)
_OFF = re.compile(r"^--?(?:no[-_]?(?:cuda|gpu|accel|mps)|cpu|force[-_]?cpu|disable[-_]?cuda)$", re.I)
_DEVICE = re.compile(r"^--?device$", re.I)


def _const(node) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _options(tree: ast.AST):
    """(option string, keywords as {name: constant}, line) of every `.add_argument("--x", ...)`."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
                and node.args):
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            kw = {k.arg: _const(k.value) for k in node.keywords if k.arg}
            for name in names:
                yield name, kw, node.lineno


def _accelerator_cpu(tree: ast.AST) -> int | None:
    """The line of a framework's `accelerator="cpu"` (Lightning's Trainer), if any."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for k in node.keywords:
                if k.arg == "accelerator" and _const(k.value) == "cpu":
                    return node.lineno
    return None


def gpu_switch(script: str) -> str | None:
    """What to pass (or change) so that the script takes its GPU branch, with the line that says so;
    None when its code does not say (a config file or an environment variable may choose)."""
    path = os.path.abspath(script)
    text = _read(path)
    files = [path] + _local_modules(text, os.path.dirname(path))
    for file in files:
        try:
            tree = ast.parse(_read(file) if file != path else text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):  # a user's file, read as hostile
            continue
        where = os.path.basename(file)
        for name, kw, line in _options(tree):
            action = kw.get("action")
            if _ON.match(name) and action in ("store_true", None) and not kw.get("default"):
                value = "" if action == "store_true" else " cuda" if _DEVICE.match(name) or "accel" in name else ""
                if action is None and not value:
                    continue
                return f"`perfaudit run {os.path.basename(script)} -- {name}{value}` (its option at {where}:{line})"
            if _OFF.match(name) and action == "store_true":
                return f"without `{name}` (its option at {where}:{line})"
            default = kw.get("default")
            if (_DEVICE.match(name) or _ON.match(name)) and isinstance(default, str) and default.startswith("cpu"):
                value = "gpu" if "accel" in name else "cuda"
                return f"`perfaudit run {os.path.basename(script)} -- {name} {value}` (its option at {where}:{line})"
        line = _accelerator_cpu(tree)
        if line is not None:
            return f"with `accelerator=\"gpu\"` (or \"auto\") instead of \"cpu\" at {where}:{line}"
    return None
