"""Command line: `perfaudit run | fix | verify | plan | analyze | lint | explain | rules`.

A skin over the library API (perfaudit.api): commands parse their options, call one API function,
render what it returns and exit. Only here do errors become one line on stderr and an exit code."""
from __future__ import annotations

import sys
from typing import Any

from ..errors import EXIT_INTERRUPTED, EXIT_OK
from . import analysis, planning, running  # noqa: F401  (the commands register themselves on `app`)
from .common import app, err, stdout_gone


def main() -> None:
    try:
        code = app(prog_name="perfaudit", standalone_mode=False)
    except BrokenPipeError:  # `perfaudit rules | head`: the reader left; that is not a failure
        stdout_gone()
        code = EXIT_OK
    except Exception as exc:
        if type(exc).__name__ == "Abort":
            err.print("perfaudit: interrupted")
            sys.exit(EXIT_INTERRUPTED)
        if not (hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int)):
            raise
        # click's usage errors (typer vendors click in recent versions): one line, as every other error
        usage: Any = exc  # click's ClickException, whichever copy of click raised it
        where = usage.ctx.command_path if getattr(usage, "ctx", None) else "perfaudit"
        if usage.format_message():  # (no arguments at all: the help was printed, nothing to add)
            err.print(f"[bold red]perfaudit: error:[/] {escape(usage.format_message())} (`{escape(where)} -h` for help)",
                      markup=True, highlight=False)
        sys.exit(usage.exit_code)
    sys.exit(code or 0)


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape
    return rich_escape(text)


__all__ = ["app", "main"]
