"""The benchmark script in its small configuration: it runs and reports ratios against baselines
measured in the same run (figures are read by people, never asserted)."""
from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, TRACES, needs_shared


def test_benchmark_small_configuration_reports_ratios():
    needs_shared(TRACES / "hta" / "negative_queue_a100_rank0.json.gz")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--size-mb", "4", "--ranks", "1,4",
                           "--skip-run"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    print(proc.stdout)
    assert "ratio perfaudit/json.load: time" in proc.stdout and "peak RSS" in proc.stdout
    assert "HTA" in proc.stdout
    assert "jobs" in proc.stdout  # the many-ranks table
