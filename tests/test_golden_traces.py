"""Golden findings on real GPU traces recorded by other projects (tests/data/gpu_traces, sources and licenses
in its README: HolisticTraceAnalysis, PARAM and TraceLens, all MIT). The expected rules, severities and
costs are in golden/expected.json (regenerate with tests/golden/regenerate.py and review the diff)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TRACES, needs_shared
from perfaudit.api import analyze

EXPECTED = json.loads((Path(__file__).with_name("golden") / "expected.json").read_text())
TOLERANCE = 0.10  # costs may move by 10 % before a golden file must be regenerated


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden_findings(name):
    report = analyze([str(needs_shared(TRACES / name))])
    got = {f.rule: f for f in report.findings}
    want = {e["rule"]: e for e in EXPECTED[name]}
    assert sorted(got) == sorted(want)
    for finding in report.findings:  # a value the trace does not carry is left out, never printed as n/a
        assert not any("n/a" in text for text in (finding.message, *finding.notes)), finding.rule
    for rule, expected in want.items():
        assert got[rule].severity == expected["severity"], rule
        if expected["ms_per_step"] is None:
            assert got[rule].cost.ms_per_step is None
        else:
            assert got[rule].cost.ms_per_step == pytest.approx(expected["ms_per_step"], rel=TOLERANCE, abs=1e-3)


def test_negative_control_stays_silent():
    """Pinned-only copies, a negligible DataLoader wait and gradients set to None (HTA's control trace)."""
    report = analyze([str(needs_shared(TRACES / "hta" / "trace_diff_control_a100_rank3.json.gz"))])
    rules = {f.rule for f in report.findings}
    assert not rules & {"COPY001", "GRAD001", "DATA001", "DATA002", "UTIL001", "AMP001"}


def test_rank_imbalance_names_the_straggler():
    report = analyze([str(needs_shared(TRACES / "param" / "dlrm_8ranks"))])
    rank = next(f for f in report.findings if f.rule == "RANK001")
    assert "Rank 7 of 8 is the straggler" in rank.message and "rank 1" in rank.message
    assert rank.cost.ms_per_step == pytest.approx(4.94, abs=0.05)


def test_pageable_copies_measured_on_resnet():
    report = analyze([str(needs_shared(TRACES / "param" / "resnet_2080ti.json.gz"))])
    copy = next(f for f in report.findings if f.rule == "COPY001")
    # 20.9 ms of copies measured, and 0.7 ms the GPU idled after the host waited for them (SYNC001 counted
    # those waits before: a pageable copy's wait is the copy's, with the copy's fix)
    assert copy.severity == "warning" and copy.cost.ms_per_step == pytest.approx(21.6, abs=0.1)
    assert copy.cost.estimated and "idle after the host waited" in copy.message
    assert not [f for f in report.findings if f.rule == "SYNC001"]


def test_console_shows_the_gpu_step_breakdown():
    from conftest import perfaudit
    proc = perfaudit("analyze", str(needs_shared(TRACES / "param" / "resnet_2080ti.json.gz")),
                     env={"COLUMNS": "160"})
    assert "GPU time" in proc.stdout and "compute" in proc.stdout and "data wait" in proc.stdout
    assert "busy 47%" in proc.stdout  # the first, partial iteration (from the trace start) is left out
