"""The type checker, clean on perfaudit/ (pyproject.toml's [tool.mypy] says what it follows and where
it cannot see a type): a wrong attribute, a None not handled or a call with the wrong arguments fails
here before it fails a user's run."""
from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_mypy_is_clean_on_the_package(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "Success: no issues found" in proc.stdout
