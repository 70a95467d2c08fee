"""The console report reads well at 80 columns: paths relative to the working directory, each location
printed once (not repeated in the message), code lines cut with an ellipsis rather than wrapped; lint
has a real header."""
from __future__ import annotations

from pathlib import Path

from conftest import perfaudit


def test_console_fits_80_columns_and_says_each_location_once(sample_report, run_dir):
    report = sample_report("data_bad.py")
    trace = Path(run_dir) / "data_bad" / "trace.json.gz"
    proc = perfaudit("analyze", str(trace), env={"COLUMNS": "80"})
    lines = proc.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    where = next(line for line in lines if "sample_scripts/data_bad.py:23" in line)
    assert where.startswith("   sample_scripts/data_bad.py:23  loader = DataLoader(")  # relative, as ruff prints
    assert where.endswith("…") and len(where) <= 80                                     # cut, not wrapped
    finding = next(f for f in report["findings"] if f["rule"] == "DATA001")
    assert "data_bad.py:23" in finding["message"]          # the JSON message keeps the location ...
    assert proc.stdout.count("data_bad.py:23") == 1        # ... the console says it once


def test_lint_has_a_header_with_files_and_rules():
    proc = perfaudit("lint", "sample_scripts/sync_bad.py", "sample_scripts/sync_good.py")
    assert "2 file(s) read, no run" in proc.stdout
    assert "with a static check: " in proc.stdout and "SYNC001" in proc.stdout.split("finding")[0]
