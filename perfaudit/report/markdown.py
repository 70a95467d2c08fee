"""A Markdown summary for $GITHUB_STEP_SUMMARY or a pull-request comment."""
from __future__ import annotations

from ..findings import Report
from .console import describe_outcome, unprofiled_note


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(report: Report) -> str:
    lines = ["## perfaudit", ""]
    if report.script:
        lines.append(f"Script `{report.script}`")
    for t in report.traces[:8]:
        step = f"{t.step_ms:.2f} ms" if t.step_ms is not None else "n/a"
        plain = unprofiled_note(t)
        lines.append(f"- `{t.path}`: {t.device}, {t.steps} measured steps, mean step {step}{'; ' + plain if plain else ''}")
    outcome = describe_outcome(report.outcome)
    if outcome:
        lines.append(f"\n**{outcome}**")
    lines.append("")
    if not report.findings:
        lines.append("No findings.")
        return "\n".join(lines) + "\n"
    lines += ["| # | severity | rule | where | cost/step | finding |", "|---|---|---|---|---|---|"]
    for i, f in enumerate(report.findings, 1):
        where = f"`{f.location.path}:{f.location.line}`" if f.location else ""
        cost = ""
        if f.verified:
            cost = f"{f.verified['saved_ms']:.2f} ms (verified, loss {f.verified['loss']})"
        elif f.cost.ms_per_step is not None:
            cost = f"{'~' if f.cost.estimated else ''}{f.cost.ms_per_step:.2f} ms"
        lines.append(f"| {i} | {f.severity} | {f.rule} | {where} | {cost} | {_cell(f.message)} |")
    lines.append("")
    lines.append("<details><summary>Fixes</summary>\n")
    for f in report.findings:
        lines.append(f"- **{f.rule}** {_cell(f.fix)}")
    lines.append("\n</details>")
    return "\n".join(lines) + "\n"
