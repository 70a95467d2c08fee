"""Every rule's own positive and negative examples, run through the real CLI. Where a finding must be
(and must not be) reported is written in the sample scripts themselves (tests/markers.py)."""
from __future__ import annotations

import pytest

from conftest import ROOT, SAMPLES
from markers import expected_lines, located, marked, quiet_lines
from perfaudit.engine.loader import load_rules

pytestmark = pytest.mark.timing  # shares and waits measured in the run decide the findings

RULES = load_rules()
EXAMPLES = [pytest.param(rule, ex, id=f"{rule.id}-{ex.target}")
            for rule in RULES for ex in rule.examples]


@pytest.mark.parametrize("rule,example", EXAMPLES)
def test_rule_example(rule, example, sample_report, trace_report, job_report):
    if example.nproc:  # a DDP sample: under torchrun, one report for the job
        report = job_report(example.script, example.nproc)
    elif example.script:
        report = sample_report(example.script.split("/")[-1])
    else:
        report = trace_report(example.trace)
    fired = [f for f in report["findings"] if f["rule"] == rule.id]
    if example.expect == "silent":
        assert not [f for f in fired if f["severity"] != "info"], fired
        if example.script:
            assert not fired, fired
        return
    assert fired, f"{rule.id} did not fire; skipped={report['skipped']}"
    finding = fired[0]
    if example.script:
        expected = expected_lines(ROOT / example.script, rule.id, "run")
        if expected:  # a rule located in the script's code reports exactly the marked lines
            assert {loc["line"] for loc in finding["locations"]} == expected
    if example.severity:
        assert finding["severity"] == example.severity
    assert finding["message"] and finding["fix"]


@pytest.mark.parametrize("script", sorted(p.name for p in SAMPLES.glob("*.py")))
def test_sample_findings_stand_on_marked_lines_only(script, sample_report):
    """Every `# expect:` line of a sample is reported; nothing is reported on a line marked `ok` or
    left unmarked (semgrep's discipline: a sample is its own test)."""
    path = SAMPLES / script
    findings = sample_report(script)["findings"]
    measured = located(findings, script, ("run", "both", "projected"))
    static_only = located(findings, script, ("static",))  # the source shows it; the run did not measure it
    assert marked(path, "run") <= measured, f"missing: {marked(path, 'run') - measured}"
    assert measured <= marked(path, "run"), f"unmarked: {measured - marked(path, 'run')}"
    assert static_only <= marked(path, "lint"), f"static, unmarked: {static_only - marked(path, 'lint')}"
    for rule, line in measured:
        assert line not in quiet_lines(path, rule, "run")


def test_sample_scripts_bad_fire_and_good_are_quiet(sample_report):
    """Each bad sample fires its rule; each good one (and the tidy loop) has nothing at warning or above."""
    samples = SAMPLES
    for path in sorted(samples.glob("*_good.py")) + [samples / "clean_loop.py"]:
        loud = [f["rule"] for f in sample_report(path.name)["findings"] if f["severity"] != "info"]
        assert not loud, f"{path.name}: {loud}"
    for path in sorted(samples.glob("*_bad.py")):
        assert sample_report(path.name)["findings"], f"{path.name} fired nothing"
