"""What `perfaudit fix` says on stderr (the diff itself goes to stdout, ready for `git apply`)."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from ..findings import Report
from ..fix.plan import FixPlan


def render_plan(report: Report, plan: FixPlan, written: list[str], console: Console) -> None:
    outcome = (report.outcome or {}).get("outcome")
    if report.script_failed:
        console.print(f"note: the script did not run cleanly ({outcome}); the fixes come from what was recorded")
    if plan.changes:
        verb = "fixed" if written else "would fix"
        files = len({c.path for c in plan.changes})
        console.print(f"[bold]{verb} {len(plan.changes)} place(s) in {files} file(s)[/]"
                      f" ({', '.join(plan.rules)})", highlight=False)
        for c in plan.changes:
            console.print(f"  {escape(c.path)}:{c.line}  {c.rule}  {escape(c.what)}", highlight=False)
        if not written:
            console.print("  (nothing written: --write applies these edits; `perfaudit verify` measures them)")
    else:
        console.print("nothing to fix automatically")
    if plan.not_fixed:
        console.print("[bold]not fixed automatically[/] (see `perfaudit explain RULE` for the change to make):")
        for n in plan.not_fixed:
            where = f"{escape(n.where)}  " if n.where else ""
            console.print(f"  {where}{n.rule}  {escape(n.reason)}", highlight=False)
    manual = sorted({f.rule for f in report.findings if f.autofix is None and f.severity != "info"})
    if manual:
        console.print(f"findings without an automatic fix: {', '.join(manual)} (`perfaudit run` shows their fixes)")
