"""What the default run finds against what `--device cpu` finds, on every realistic script (issue 38: the
emulated CUDA path must lose nothing the CPU run sees).

    python benchmarks/bench_parity.py                 # tests/realistic/*.py, about 8 minutes on 2 cores
    python benchmarks/bench_parity.py tests/realistic/vae.py

Each script runs twice (`--warmup 2 --steps 3`, as the tests run them): the default (the CUDA path emulated where
the script has one) and `--device cpu`. Printed per script: the branch the default run reported and each finding
of a rule whose verdict is the code's, not the machine's speed, that the CPU run placed at a line and the default
run did not, with what the default run reports at that line instead and the line's own `# ok:` marker, if any
(a difference the script's CUDA branch makes on purpose: workers only on CUDA, a host-made tensor's copy that is
COPY002 there)."""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# rules whose verdict is the code's (what it calls, where), not how fast this machine ran it
DETERMINISTIC = {"SYNC001", "BN001", "OPT001", "OPT002", "DEBUG001", "GRAD001", "DIST001", "MEM001", "COPY001",
                 "COPY002", "DATA001", "AMP002", "CUDNN001"}


def findings(script: Path, device: str, out: Path) -> tuple[dict, str]:
    """(rule, line) -> severity of the script's own lines, and the device the report names."""
    report = out / f"{script.stem}.{device}.json"
    subprocess.run([sys.executable, "-m", "perfaudit", "run", str(script), "--warmup", "2", "--steps", "3",
                    "--device", device, "--out-dir", str(out / f"{script.stem}.{device}"), "-f", f"json={report}"],
                   cwd=script.parent, capture_output=True, timeout=600)
    if not report.exists():
        return {}, "no report"
    data = json.loads(report.read_text())
    placed = {(f["rule"], loc["line"]): f["severity"] for f in data["findings"] for loc in f["locations"]
              if Path(loc["path"]).name == script.name}
    return placed, data["run"]["device"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scripts", nargs="*", type=Path, default=sorted((ROOT / "tests" / "realistic").glob("*.py")))
    opts = parser.parse_args()
    lost_total, differ = 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for script in opts.scripts:
            script = script.resolve()
            default, branch = findings(script, "auto", Path(tmp))
            cpu, _ = findings(script, "cpu", Path(tmp))
            lines = script.read_text().splitlines()
            lost = sorted(k for k in cpu if k[0] in DETERMINISTIC and k not in default)
            said = []
            for rule, line in lost:
                there = sorted(r for r, n in default if n == line)
                marker = re.search(r"#\s*ok:\s*([A-Z0-9, ]+)", lines[line - 1]) if line <= len(lines) else None
                on_purpose = bool(there) or (marker is not None and rule in marker.group(1))
                differ += on_purpose
                lost_total += not on_purpose
                said.append(f"{rule}@{line}" + (f" (default: {', '.join(there)})" if there else "")
                            + (" (marked ok)" if marker is not None and rule in marker.group(1) else ""))
            print(f"{script.name:32s} {branch:38s} {'; '.join(said) or '-'}", flush=True)
    print(f"\n{len(opts.scripts)} scripts: {lost_total} finding(s) of the CPU run lost by the default run, {differ} "
          "reported otherwise on purpose (another rule at the line, or the line marked ok)")


if __name__ == "__main__":
    main()
