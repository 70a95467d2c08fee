"""What turns on a script's own mixed precision, when its code says: the autocast region it enters with
`enabled=` off is switched by a value read back to an argparse option (`enabled=self.cfg.amp` and
`add_argument("--amp", action="store_true")`), or the script has an option named for it that is off by
default (`--amp`, `--fp16`, `--bf16`, `--mixed-precision`, `--use-amp`, `--autocast`). Read with `ast`
(no import of the script)."""
from __future__ import annotations

import ast
import re

from .cuda_path import _read
from .gpu_switch import _options

_AMP = re.compile(r"^--?(?:use[-_]?)?(?:amp|fp16|bf16|half|mixed[-_]?precision|autocast)$", re.I)


def _dest(option: str) -> str:
    return option.lstrip("-").replace("-", "_")


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
