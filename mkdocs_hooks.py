"""MkDocs hook: one page per rule, generated from the rule's own file (rules/*.yaml) when the site is
built, as ruff does, plus the rules' index. Nothing generated is committed, so the pages cannot drift
from the rules; a rule whose docs are missing fails the strict build."""
from __future__ import annotations

from mkdocs.structure.files import File


def _rules():
    from perfaudit.engine.loader import load_rules
    return sorted(load_rules(), key=lambda r: r.id)


def _examples(rule) -> str:
    rows = []
    for ex in rule.examples:
        target = ex.script or ex.trace
        expect = {"fire": "fires", "silent": "stays silent"}.get(ex.expect, ex.expect)
        rows.append(f"- `{target}`: {expect}" + (f" ({ex.severity})" if ex.severity else ""))
    return "## Examples the test suite runs\n\n" + "\n".join(rows)


def rule_page(rule) -> str:
    from perfaudit.report.docs import rule_markdown
    return rule_markdown(rule) + "\n\n" + _examples(rule) + "\n"


def index_page(rules) -> str:
    from perfaudit.tips import TIPS
    lines = ["# Rules", "",
             "One YAML file per rule in `rules/`, each carrying its documentation and examples; this page and "
             "the rule pages are generated from those files. `perfaudit explain RULE` prints the same text.",
             "", "| rule | severity | tips | what it finds |", "|---|---|---|---|"]
    for r in rules:
        tips = ", ".join(f"{t}" for t in r.tips)
        lines.append(f"| [{r.id}]({r.id}.md) | {r.severity} | {tips} | {r.summary} |")
    lines += ["", "## Tips", "", "| tip | title | rules |", "|---|---|---|"]
    for tip, title in TIPS.items():
        implementing = ", ".join(f"[{r.id}]({r.id}.md)" for r in rules if tip in r.tips) or "advice only"
        lines.append(f"| {tip} | {title} | {implementing} |")
    return "\n".join(lines) + "\n"


def on_files(files, config):
    rules = _rules()
    files.append(File.generated(config, "rules/index.md", content=index_page(rules)))
    for rule in rules:
        files.append(File.generated(config, f"rules/{rule.id}.md", content=rule_page(rule)))
    return files

