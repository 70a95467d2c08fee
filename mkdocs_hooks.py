"""MkDocs hook: one page per rule, generated from the rule's own file (rules/*.yaml) when the site is
built, as ruff does, plus the rules' index. Nothing generated is committed, so the pages cannot drift
from the rules; a rule whose docs are missing fails the strict build. The tip catalogue (docs/tips.md) is
committed, so that the README's link to it works on a forge too: `python mkdocs_hooks.py` writes it from
perfaudit/tips.py and the rules, and a test fails when it is stale."""
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


def tips_page(rules) -> str:
    """The tip catalogue: what each tip asks, the rules that check it, and where it comes from."""
    from perfaudit.tips import ASKS, SOURCES, TIPS
    lines = ["# The tip catalogue", "",
             "perfaudit turns performance tips into rules. Each tip below is what a training script is asked to "
             "do; the rules that check it link to their pages, whose references are the tip's sources (a tip "
             "without a rule is advice perfaudit gives in its reports).", "",
             "| tip | what it asks | rules | references |", "|---|---|---|---|"]
    for tip, title in TIPS.items():
        checking = [r for r in rules if tip in r.tips]
        names = ", ".join(f"[{r.id}](rules/{r.id}.md)" for r in checking) or "advice"
        refs = sorted({ref for r in checking for ref in r.docs.references})
        links = ", ".join(f"[{i}]({ref})" for i, ref in enumerate(refs, 1)) or "see Sources"
        lines.append(f"| {tip} | **{title}**. {ASKS[tip]} | {names} | {links} |")
    lines += ["", "## Sources", ""] + [f"- {s}" for s in SOURCES]
    return "\n".join(lines) + "\n"


def on_files(files, config):
    rules = _rules()
    files.append(File.generated(config, "rules/index.md", content=index_page(rules)))
    for rule in rules:
        files.append(File.generated(config, f"rules/{rule.id}.md", content=rule_page(rule)))
    return files


if __name__ == "__main__":
    from pathlib import Path
    (Path(__file__).parent / "docs" / "tips.md").write_text(tips_page(_rules()))
