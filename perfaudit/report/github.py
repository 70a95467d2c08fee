"""GitHub Actions workflow commands: one annotation per finding location."""
from __future__ import annotations

from ..findings import Report

COMMAND = {"error": "error", "warning": "warning", "info": "notice"}


def _escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def render(report: Report) -> str:
    out = []
    for f in report.findings:
        title = _escape(f"{f.rule} {f.title}", prop=True)
        message = _escape(f"{f.message} Fix: {f.fix}")
        if not f.locations:
            out.append(f"::{COMMAND[f.severity]} title={title}::{message}")
        for loc in f.locations[:10]:
            out.append(f"::{COMMAND[f.severity]} file={_escape(loc.path, True)},line={loc.line},title={title}::{message}")
    return "\n".join(out) + ("\n" if out else "")
