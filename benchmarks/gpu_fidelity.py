"""What a real GPU run finds against the lines a script marks (tests/markers.py), for the emulation's fidelity.

    python benchmarks/gpu_fidelity.py RUNS_DIR [--emulated DIR]

RUNS_DIR holds `perfaudit run` JSON reports named after their scripts (benchmarks/record_fidelity_on_gpu.sh).
For each: the (rule, line) marks `expect`/`expect-run` that the GPU run found and missed, the findings at
warning or above it made on lines marked `ok`, and, with `--emulated DIR` (the same scripts' reports from this
machine's emulated CUDA path), the (rule, line) pairs one found and the other did not.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from markers import marked, quiet_lines  # noqa: E402


def _script(report: dict) -> Path | None:
    name = Path((report.get("run") or {}).get("script") or "").name
    hits = [*ROOT.glob(f"tests/realistic/{name}"), *ROOT.glob(f"sample_scripts/{name}")]
    return hits[0] if name and hits else None


def _pairs(report: dict, name: str, levels=("error", "warning", "info")) -> set[tuple[str, int]]:
    return {(f["rule"], loc["line"]) for f in report.get("findings", []) if f.get("severity") in levels
            for loc in f.get("locations", []) if Path(loc["path"]).name == name}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("--emulated")
    a = ap.parse_args()
    misses = 0
    for path in sorted(Path(a.runs).glob("*.json")):
        try:
            report = json.loads(path.read_text())
        except ValueError:
            print(f"{path.stem}: unreadable report")
            continue
        script = _script(report)
        if script is None:
            print(f"{path.stem}: script not found ({(report.get('run') or {}).get('outcome')})")
            continue
        found = _pairs(report, script.name)
        want = marked(script, "run")
        missed = sorted(want - found)
        alarms = sorted((r, ln) for r, ln in _pairs(report, script.name, ("error", "warning"))
                        if ln in quiet_lines(script, r, "run"))
        misses += len(missed) + len(alarms)
        line = f"{path.stem}: device {(report.get('run') or {}).get('device')}, marked {len(want)}, " \
               f"missed {missed or '-'}, false alarms {alarms or '-'}"
        if a.emulated and (Path(a.emulated) / path.name).exists():
            emu = _pairs(json.loads((Path(a.emulated) / path.name).read_text()), script.name)
            line += f"; GPU only {sorted(found - emu) or '-'}; emulated only {sorted(emu - found) or '-'}"
        print(line)
    print(f"\n{misses} marks missed or false alarms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
