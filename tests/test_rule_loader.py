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
