"""Regenerate expected.json from the current analysis of tests/data/gpu_traces (review the diff before committing).

    python tests/golden/regenerate.py
"""
import json
from pathlib import Path

from perfaudit.api import analyze

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "data" / "gpu_traces"


def targets():
    for path in sorted(TRACES.rglob("*.json.gz")):
        if "dlrm_8ranks" not in path.parts:
            yield path
    yield TRACES / "param" / "dlrm_8ranks"


def summarise(report) -> list[dict]:
    return [{"rule": f.rule, "severity": f.severity,
             "ms_per_step": round(f.cost.ms_per_step, 3) if f.cost.ms_per_step is not None else None}
            for f in report.findings]


if __name__ == "__main__":
    expected = {str(p.relative_to(TRACES)): summarise(analyze([str(p)])) for p in targets()}
    out = Path(__file__).with_name("expected.json")
    out.write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out} ({len(expected)} traces)")
