"""Where a DataLoader's setting comes from, when the script's own code says: `batch_size=args.batch_size` (any
name bound to the parser's result) read back to its `add_argument("--batch-size", default=16)`. The batch plan
(`perfaudit plan`) then gives the change as the option to pass, not an edit of the loader's line; `perfaudit
fix` does so for `num_workers=args.workers`. Read with `ast` (no import of the script)."""
from __future__ import annotations

import ast

from .cuda_path import _read
from .gpu_switch import _dest, _options


def batch_option(path: str, line: int) -> tuple[str, int] | None:
    """(the option, its line) that sets the batch_size of the DataLoader built at `path`:`line`, or None when
    the loader's batch_size is not an attribute of a parsed namespace with an option of that name."""
    return loader_option(path, line, "batch_size")


def loader_option(path: str, line: int, keyword: str) -> tuple[str, int] | None:
    """(the option, its line) that sets the `keyword` argument of the call at `path`:`line` (a DataLoader's
    batch_size or num_workers), or None when that argument is not an attribute of a parsed namespace with an
    option of that name."""
    try:
        tree = ast.parse(_read(path))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):  # a user's file, read as hostile
        return None
    attr = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.lineno <= line <= (node.end_lineno or node.lineno):
            for k in node.keywords:
                if k.arg == keyword and isinstance(k.value, ast.Attribute):
                    attr = k.value.attr
    if attr is None:
        return None
    found = [(name, at) for name, kw, at in _options(tree) if name.startswith("-")
             and (kw.get("dest") == attr or (kw.get("dest") is None and _dest(name) == attr))]
    return max(found, key=lambda f: f[0].startswith("--"), default=None)  # the long form, as users write it
