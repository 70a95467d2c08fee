"""The switches a script's own code has. How it is told to take its GPU branch: an argparse flag (`--cuda`,
`--gpu`, `--use-cuda`, `--accel`), a `--device` option whose default is the CPU, a `--no-cuda` flag, or a
framework's accelerator argument. And what turns on its own mixed precision: the autocast region it enters
with `enabled=` off, switched by a value read back to an argparse option (`enabled=self.cfg.amp` and
`add_argument("--amp", action="store_true")`), or an option named for it that is off by default (`--amp`,
`--fp16`, `--bf16`, `--mixed-precision`, `--use-amp`, `--autocast`). Read with `ast` (no import of the script)."""
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


def _dest(option: str) -> str:
    """The attribute argparse stores an option in, without dest= (`--batch-size` -> "batch_size")."""
    return option.lstrip("-").replace("-", "_")


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


# -- mixed precision ---------------------------------------------------------------------------------
_AMP = re.compile(r"^--?(?:use[-_]?)?(?:amp|fp16|bf16|half|mixed[-_]?precision|autocast)$", re.I)


def _enabled_name(tree: ast.AST, line: int) -> str | None:
    """The last name of the value given as `enabled=` to the call at `line` (`self.cfg.amp` -> "amp")."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.lineno <= line <= (node.end_lineno or node.lineno):
            for k in node.keywords:
                if k.arg == "enabled":
                    value = k.value  # `enabled=not args.no_amp`: no option of that name turns it on
                    if isinstance(value, ast.Attribute):
                        return value.attr
                    if isinstance(value, ast.Name):
                        return value.id
    return None


def _tree(path: str) -> ast.AST | None:
    try:
        return ast.parse(_read(path))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):  # a user's file, read as hostile
        return None


def amp_switch(script: str, path: str, line: int) -> tuple[str, str, int] | None:
    """How to turn on the autocast region entered, switched off, at `path`:`line` of `script`'s run: the script's
    own option and where it is (its file, the script or the region's, and line), or None
    when the code does not say (a config file, a constant: then the region's `enabled=` is what to change)."""
    region = _tree(path)
    name = _enabled_name(region, line) if region is not None else None
    options = []
    for file in dict.fromkeys([script, path]):
        tree = region if file == path else _tree(file)
        if tree is not None:
            options += [(option, kw, file, at) for option, kw, at in _options(tree)
                        if option.startswith("--")]
    named = [o for o in options if name and (o[1].get("dest") or _dest(o[0])) == name]
    for option, kw, where, at in named + [o for o in options if _AMP.match(o[0])]:
        if kw.get("action") == "store_true" and not kw.get("default"):
            return option, where, at
    return None
