"""What the integrations share: the report on the console, as `perfaudit run` prints it."""
from __future__ import annotations

import sys

from ..report import console as console_report


def show(report) -> None:
    """The report, as `perfaudit run` prints it, on stderr (the training's own output stays on stdout)."""
    from rich.console import Console
    console_report.render(report, Console(file=sys.stderr))
