"""The CI gate: formats CI systems read, configuration, suppressions, baselines and the static pass."""
from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET

import jsonschema
import pytest
import yaml

from conftest import ROOT, SAMPLES, perfaudit, sarif_schemas
from markers import marked


def _static_expected() -> dict[str, list]:
    """What the source alone shows in each sample, read from its `# expect:` markers."""
    out = {}
    for path in sorted(SAMPLES.glob("*.py")):
        found = sorted(marked(path, "lint"))
        if found:
            out[path.name] = found
    return out


STATIC = _static_expected()


@pytest.fixture(scope="module")
def lint_report():
    proc = perfaudit("lint", str(SAMPLES), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_lint_finds_each_static_pattern_at_its_line_and_nothing_in_good_scripts(lint_report):
    found: dict[str, list] = {}
    for f in lint_report["findings"]:
        found.setdefault(f["location"]["path"].split("/")[-1], []).append((f["rule"], f["location"]["line"]))
    assert {k: sorted(v) for k, v in found.items()} == STATIC


def test_lint_does_not_import_torch():
    import subprocess
    import sys
    code = ("import sys; from typer.testing import CliRunner; from perfaudit.cli import app; "
            f"r = CliRunner().invoke(app, ['lint', {str(SAMPLES / 'sync_bad.py')!r}]); "
            "assert r.exit_code == 0, r.output; assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_sarif_validates_against_the_schema(run_dir, sample_report, tmp_path):
    sample_report("sync_bad.py")
    out = tmp_path / "out.sarif"
    proc = perfaudit("analyze", f"{run_dir}/sync_bad/trace.json.gz", "--format", f"sarif={out}")
    assert proc.returncode == 0, proc.stderr
    sarif = json.loads(out.read_text())
    for schema in sarif_schemas():
        jsonschema.validate(sarif, schema)
    run = sarif["runs"][0]
    result = next(r for r in run["results"] if r["ruleId"] == "SYNC001")
    assert result["level"] == "warning"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "sample_scripts/sync_bad.py"
    assert location["region"]["startLine"] == 18
    rule = run["tool"]["driver"]["rules"][result["ruleIndex"]]
    assert rule["id"] == "SYNC001" and "Why is this slow?" in rule["help"]["markdown"]


def test_junit_has_a_case_per_rule_and_a_failure_per_finding(tmp_path):
    out = tmp_path / "junit.xml"
    proc = perfaudit("lint", str(SAMPLES), "--format", f"junit={out}")
    assert proc.returncode == 0
    suite = ET.parse(out).getroot().find("testsuite")
    rules = json.loads(perfaudit("rules", "--format", "json").stdout)
    assert int(suite.get("tests")) == len(rules) == len(suite.findall("testcase"))
    failures = suite.findall("testcase/failure")
    assert int(suite.get("failures")) == len(failures) == sum(len(v) for v in STATIC.values())


def test_github_and_markdown_formats(tmp_path):
    md = tmp_path / "summary.md"
    proc = perfaudit("lint", str(SAMPLES / "sync_bad.py"), "--format", "github", "--format", f"markdown={md}")
    assert "::warning file=" in proc.stdout and ",line=18," in proc.stdout
    assert "| SYNC001 |" in md.read_text()


def _project(tmp_path, script="sync_bad.py"):
    shutil.copy(SAMPLES / script, tmp_path / "train.py")
    return tmp_path / "train.py"


def test_suppression_changes_the_exit_code_and_stale_ones_are_reported(tmp_path):
    train = _project(tmp_path)
    assert perfaudit("lint", "train.py", "--fail-on", "warning", cwd=tmp_path).returncode == 1
    text = train.read_text().replace("running += loss.item()", "running += loss.item()  # perfaudit: ignore[SYNC001]")
    train.write_text(text + "x = 1  # perfaudit: ignore\n")
    proc = perfaudit("lint", "train.py", "--fail-on", "warning", "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0
    stale = [f for f in json.loads(proc.stdout)["findings"] if f["rule"] == "NOQA001"]
    assert [f["location"]["line"] for f in stale] == [len(text.splitlines()) + 1]


def test_config_selection_severity_and_errors(tmp_path):
    _project(tmp_path)
    config = tmp_path / "pyproject.toml"
    config.write_text('[tool.perfaudit]\nfail-on = "warning"\n')
    assert perfaudit("lint", "train.py", cwd=tmp_path).returncode == 1
    config.write_text('[tool.perfaudit]\nfail-on = "warning"\nignore = ["T01"]\n')  # by tip id
    assert perfaudit("lint", "train.py", cwd=tmp_path).returncode == 0
    config.write_text('[tool.perfaudit]\nfail-on = "error"\n[tool.perfaudit.severity]\nSYNC001 = "error"\n')
    assert perfaudit("lint", "train.py", cwd=tmp_path).returncode == 1
    assert perfaudit("lint", "train.py", "--fail-on", "never", cwd=tmp_path).returncode == 0  # flag wins
    (tmp_path / "perfaudit.toml").write_text("select = ['SYNC']\nwarmup = -1\n")
    proc = perfaudit("lint", "train.py", cwd=tmp_path)
    assert proc.returncode == 2 and "perfaudit.toml" in proc.stderr and "'warmup'" in proc.stderr
    (tmp_path / "perfaudit.toml").write_text("[thresholds.SYNC001]\nmin_step_sharee = 0.2\n")
    proc = perfaudit("lint", "train.py", cwd=tmp_path)
    assert proc.returncode == 2 and "min_step_sharee" in proc.stderr


def test_baseline_survives_edits_above_and_fails_on_new_findings(tmp_path):
    train = _project(tmp_path)
    assert perfaudit("lint", "train.py", "--baseline-write", "base.json", cwd=tmp_path).returncode == 0
    train.write_text("# a new comment\n\n" + train.read_text())  # the finding moves two lines down
    assert perfaudit("lint", "train.py", "--baseline", "base.json", "--fail-on", "warning",
                     cwd=tmp_path).returncode == 0
    train.write_text(train.read_text() + "    optimizer.zero_grad(set_to_none=False)\n")
    proc = perfaudit("lint", "train.py", "--baseline", "base.json", "--fail-on", "warning", "--format", "json",
                     cwd=tmp_path)
    assert proc.returncode == 1
    assert [f["rule"] for f in json.loads(proc.stdout)["findings"]] == ["GRAD001"]


def test_run_reports_a_static_finding_once_with_both_evidences(sample_report):
    report = sample_report("sync_bad.py")
    syncs = [f for f in report["findings"] if f["rule"] == "SYNC001"]
    assert len(syncs) == 1
    assert any("Confirmed by the static pass" in n for n in syncs[0]["notes"])


def test_pre_commit_hook_definition():
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hooks[0]["id"] == "perfaudit-lint" and hooks[0]["entry"].startswith("perfaudit lint")
