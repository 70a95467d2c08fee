"""Every rule's own positive and negative examples, run through the real CLI."""
from __future__ import annotations

import pytest

from perfaudit.engine.loader import load_rules

RULES = load_rules()
EXAMPLES = [pytest.param(rule, ex, id=f"{rule.id}-{ex.get('script') or ex.get('trace')}")
            for rule in RULES for ex in rule.examples]


@pytest.mark.parametrize("rule,example", EXAMPLES)
def test_rule_example(rule, example, sample_report, trace_report):
    if "script" in example:
        report = sample_report(example["script"].split("/")[-1])
    else:
        report = trace_report(example["trace"])
    fired = [f for f in report["findings"] if f["rule"] == rule.id]
    if example["expect"] == "silent":
        assert not [f for f in fired if f["severity"] != "info"], fired
        if "script" in example:
            assert not fired, fired
        return
    assert fired, f"{rule.id} did not fire; skipped={report['skipped']}"
    finding = fired[0]
    if "lines" in example:
        assert sorted({loc["line"] for loc in finding["locations"]}) == sorted(example["lines"])
    if "severity" in example:
        assert finding["severity"] == example["severity"]
    assert finding["message"] and finding["fix"]


def test_sample_scripts_bad_fire_and_good_are_quiet(sample_report):
    """Each bad sample fires its rule; each good one (and the tidy loop) has nothing at warning or above."""
    from pathlib import Path
    samples = Path(__file__).resolve().parent.parent / "sample_scripts"
    for path in sorted(samples.glob("*_good.py")) + [samples / "clean_loop.py"]:
        loud = [f["rule"] for f in sample_report(path.name)["findings"] if f["severity"] != "info"]
        assert not loud, f"{path.name}: {loud}"
    for path in sorted(samples.glob("*_bad.py")):
        assert sample_report(path.name)["findings"], f"{path.name} fired nothing"
