"""Rule files are data: bad ones are rejected with the file and the key named."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from perfaudit.engine.loader import builtin_rules_dir, load_rule, load_rules
from perfaudit.errors import RuleError

SYNC = Path(builtin_rules_dir()) / "SYNC001.yaml"


def _write(tmp_path, mutate) -> Path:
    spec = yaml.safe_load(SYNC.read_text())
    mutate(spec)
    path = tmp_path / "RULE.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("mutate,expected", [
    (lambda s: s.update(colour="red"), "colour"),
    (lambda s: s.update(severity="fatal"), "severity"),
    (lambda s: s.update(tips="T01"), "tips"),
    (lambda s: s.update(tips=["T99"]), "T99"),
    (lambda s: s["docs"].pop("why"), "why"),
    (lambda s: s.update(when={"fact": "no.such.fact", "op": ">", "value": 1}), "no.such.fact"),
    (lambda s: s["evidence"]["where"][0].update(value={"threshold": "nope"}), "nope"),
    (lambda s: s.update(message="{undefined_value} syncs"), "undefined_value"),
    (lambda s: s.update(when={"fact": "step.count", "op": "eval", "value": 1}), "when"),
])
def test_invalid_rule_names_file_and_key(tmp_path, mutate, expected):
    path = _write(tmp_path, mutate)
    with pytest.raises(RuleError) as exc:
        load_rule(path)
    assert str(path) in str(exc.value) and expected in str(exc.value)


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "BAD.yaml"
    path.write_text("id: X001\ntitle: [unclosed\n")
    with pytest.raises(RuleError, match=r"BAD.yaml: YAML syntax error"):
        load_rule(path)


def test_duplicate_rule_id_across_directories(tmp_path):
    shutil.copy(SYNC, tmp_path / "copy.yaml")
    with pytest.raises(RuleError, match="duplicate rule id SYNC001"):
        load_rules((str(tmp_path),))


def test_rule_text_is_never_evaluated(tmp_path):
    from conftest import TRACES, needs_shared
    from perfaudit.api import evaluate_trace
    from perfaudit.trace import load_trace
    marker = tmp_path / "pwned"
    payload = f"{{__import__('os').system('touch {marker}')}}"
    rule = load_rule(_write(tmp_path, lambda s: s.update(message=payload, fix="!!python/object:os.system")))
    trace = load_trace(str(needs_shared(TRACES / "tracelens_h100" / "qwen_0.5b_inference_h100.json.gz")))
    findings, _, _ = evaluate_trace(trace, [rule])
    assert findings and findings[0].message == payload  # rendered as plain text
    assert not marker.exists()


def test_absurd_format_width_is_rejected(tmp_path):
    path = _write(tmp_path, lambda s: s.update(message="{ms_per_step:999999999.2f} ms"))
    with pytest.raises(RuleError, match="unsupported format"):
        load_rule(path)


def test_a_bug_in_a_fact_fails_in_strict_mode_and_is_said_otherwise():
    """Only data from outside may be missing: a fact that raises TypeError is a bug, never 'no data'."""
    from perfaudit.facts import FACTS, Context, Missing
    from perfaudit.facts.registry import FactSpec

    def broken(ctx):
        return None + 1

    FACTS["test.broken"] = FactSpec("test.broken", "a fact with a bug", broken)
    try:
        with pytest.raises(TypeError):
            Context(None, {}, strict=True).get("test.broken")
        lenient = Context(None, {}, strict=False)
        with pytest.raises(Missing, match="internal error in fact test.broken"):
            lenient.get("test.broken")
        assert lenient.errors and "please report" in lenient.errors[0]
    finally:
        del FACTS["test.broken"]


def test_malformed_probe_data_is_dropped_at_the_boundary():
    from perfaudit.facts import Context, Missing
    ctx = Context(None, {"optimizers": [{"class": 3}], "schedulers": [], "environment": {"cpu_count": "many"}},
                  strict=True)
    assert ctx.malformed_probes == ["optimizers", "environment"]
    assert ctx.get("optim.has_scheduler") is False
    with pytest.raises(Missing, match="malformed"):
        ctx.get("optim.advice_sites")


def test_explain_shows_rules_from_rules_dir(tmp_path):
    from conftest import perfaudit
    (tmp_path / "X.yaml").write_text(SYNC.read_text().replace("id: SYNC001", "id: XTRA001"))
    proc = perfaudit("explain", "XTRA001", "--rules-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "XTRA001" in proc.stdout and "Why is this slow?" in proc.stdout
