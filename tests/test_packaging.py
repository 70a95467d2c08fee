"""The wheel users install carries every rule file and every package, and finds them like an
editable install does; the code meets the project's own ruff settings."""
from __future__ import annotations

import subprocess
import sys
import zipfile

from conftest import ROOT
from perfaudit import __version__


def test_wheel_ships_every_rule_and_package(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path / "dist"), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("perfaudit-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    # one version: the package's, in the wheel's name and metadata and in `perfaudit --version`
    assert wheel.name.startswith(f"perfaudit-{__version__}-"), wheel.name
    metadata = zipfile.ZipFile(wheel).read(f"perfaudit-{__version__}.dist-info/METADATA").decode()
    assert f"\nVersion: {__version__}\n" in metadata
    shown = subprocess.run([sys.executable, "-m", "perfaudit", "--version"], capture_output=True, text=True)
    assert shown.stdout.strip() == f"perfaudit {__version__}", shown.stdout + shown.stderr
    rule_files = sorted(p.name for p in (ROOT / "rules").glob("*.yaml"))
    assert rule_files and all(f"perfaudit/rules/{name}" in names for name in rule_files)
    packages = sorted(str(p.parent.relative_to(ROOT)) for p in (ROOT / "perfaudit").rglob("__init__.py"))
    assert all(f"{package}/__init__.py" in names for package in packages), packages

    # installed from the wheel (not the checkout), perfaudit finds the same rules
    target = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                           str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    code = ("import perfaudit; from perfaudit.engine.loader import load_rules, builtin_rules_dir; "
            "print(perfaudit.__file__); print(builtin_rules_dir()); print(len(load_rules()))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    module, rules_dir, count = proc.stdout.split()
    assert module.startswith(str(target)) and rules_dir.startswith(str(target))
    assert int(count) == len(rule_files)


def test_code_meets_the_ruff_settings():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "perfaudit", "tests", "benchmarks"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
