"""A rule's documentation, rendered from its own file (the same text the tests check)."""
from __future__ import annotations

from rich.console import Console
from rich.markdown import Markdown

from ..engine.loader import Rule
from ..tips import TIPS

SECTIONS = (("what", "What it does"), ("why", "Why is this slow?"), ("example", "Example"),
            ("use_instead", "Use instead"), ("references", "References"))


def rule_docs_dict(rule: Rule) -> dict:
    return {"id": rule.id, "title": rule.title, "severity": rule.severity, "summary": rule.summary,
            "tips": {t: TIPS[t] for t in rule.tips}, "thresholds": rule.thresholds, "fix": rule.fix,
            **{key: list(v) if isinstance(v := getattr(rule.docs, key), tuple) else v for key, _ in SECTIONS}}


def rule_markdown(rule: Rule) -> str:
    docs = {key: getattr(rule.docs, key) for key, _ in SECTIONS}
    tips = ", ".join(f"{t} ({TIPS[t]})" for t in rule.tips)
    parts = [f"# {rule.id}: {rule.title}", f"*{rule.severity}* · tips: {tips}", rule.summary]
    for key, heading in SECTIONS:
        parts.append(f"## {heading}")
        if key in ("example", "use_instead"):
            parts.append(f"```python\n{docs[key].rstrip()}\n```")
        elif key == "references":
            parts.append("\n".join(f"- {ref}" for ref in docs[key]))
        else:
            parts.append(docs[key])
    if rule.thresholds:
        parts.append("## Thresholds")
        parts.append("\n".join(f"- `{k}`: {v}" for k, v in rule.thresholds.items()))
    return "\n\n".join(parts)


def render_rule_docs(rule: Rule, console: Console) -> None:
    console.print(Markdown(rule_markdown(rule)))
    console.print()
