"""Every rule is complete: docs, examples both ways, tips from the catalogue, a unique id."""
from __future__ import annotations

import re
from collections import Counter

import pytest

from conftest import SHARED, perfaudit
from perfaudit.engine.loader import load_rules
from perfaudit.report.docs import SECTIONS
from perfaudit.tips import TIPS

RULES = load_rules()


def test_rule_ids_unique_and_well_formed():
    ids = Counter(r.id for r in RULES)
    assert all(n == 1 for n in ids.values()), ids
    assert all(re.fullmatch(r"[A-Z]+\d{3}", i) for i in ids)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_rule_is_documented_and_has_examples(rule):
    for key, _ in SECTIONS:
        assert getattr(rule.docs, key), f"{rule.id} lacks docs.{key}"
    expects = {e.expect for e in rule.examples}
    assert expects == {"fire", "silent"}, f"{rule.id} needs a positive and a negative example"
    assert all(t in TIPS for t in rule.tips)


def test_embedded_catalogue_matches_shared_tips():
    tips_md = SHARED / "TIPS.md"
    if not tips_md.exists():
        pytest.skip("../shared/TIPS.md not present")
    ids = re.findall(r"^\| (T\d{2}) \|", tips_md.read_text(), flags=re.M)
    assert sorted(ids) == sorted(TIPS)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_explain_prints_the_rule_docs(rule):
    """The CLI's own command, in this process (one interpreter start per rule would cost a CPU-minute of
    the suite; test_explain_accepts_a_tip_id runs the command as a user does)."""
    from typer.testing import CliRunner

    from perfaudit.cli import app
    result = CliRunner().invoke(app, ["explain", rule.id], prog_name="perfaudit")
    assert result.exit_code == 0, result.output
    for _, heading in SECTIONS:
        assert heading in result.output
    assert rule.title.split()[0] in result.output


def test_explain_accepts_a_tip_id():
    proc = perfaudit("explain", "t01")
    assert proc.returncode == 0 and "SYNC001" in proc.stdout


def test_explain_unknown_id_names_the_nearest():
    proc = perfaudit("explain", "SYNC01")
    assert proc.returncode == 2
    assert "SYNC001" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_rules_lists_every_rule_as_json():
    import json
    proc = perfaudit("rules", "--format", "json")
    rows = json.loads(proc.stdout)
    assert {r["id"] for r in rows} == {r.id for r in RULES}
    assert all(r["tips"] and r["summary"] and r["severity"] in ("info", "warning", "error") for r in rows)
