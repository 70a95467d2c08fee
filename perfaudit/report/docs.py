"""A rule's documentation, rendered from its own file (the same text the tests check)."""
from __future__ import annotations

from rich.console import Console
from rich.markdown import Markdown

from ..engine.loader import Rule
from ..fix.catalog import FIX_KINDS
from ..tips import TIPS

SECTIONS = (("what", "What it does"), ("why", "Why is this slow?"), ("example", "Example"),
            ("use_instead", "Use instead"), ("references", "References"))


def rule_docs_dict(rule: Rule) -> dict:
    return {"id": rule.id, "title": rule.title, "severity": rule.severity, "summary": rule.summary,
            "tips": {t: TIPS[t] for t in rule.tips}, "thresholds": rule.thresholds, "fix": rule.fix,
            "autofix": _autofix(rule),
            **{key: list(v) if isinstance(v := getattr(rule.docs, key), tuple) else v for key, _ in SECTIONS}}


def _autofix(rule: Rule) -> dict | None:
    if rule.autofix is None:
        return None
    kind = FIX_KINDS[rule.autofix["kind"]]
    return {"kind": rule.autofix["kind"], "description": kind.description, "same_maths": kind.same_maths}


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
    fix = _autofix(rule)
    parts.append("## Automatic fix")
    parts.append(f"`perfaudit fix` makes this edit: {fix['description']} ({fix['kind']}); "
                 + ("`perfaudit verify` expects the same loss, step for step." if fix["same_maths"] else
                    "it may change initialisation or data order, so `verify` compares the mean loss "
                    "within a tolerance.")
                 if fix else "None: the change depends on your code (see the fix in a finding).")
    if rule.thresholds:
        parts.append("## Thresholds")
        parts.append("\n".join(f"- `{k}`: {v}" for k, v in rule.thresholds.items()))
    return "\n\n".join(parts)


def render_rule_docs(rule: Rule, console: Console) -> None:
    console.print(Markdown(rule_markdown(rule)))
    console.print()
