#!/usr/bin/env bash
# On a lent GPU: the mixed-precision scripts run plainly (their step and torch's peaks, gpu_plain_steps.py) and
# under `perfaudit run` (the GPU's own compute time and memory: the references for the emulated device's float32
# math standing for 16-bit, collect/emulation/precision/half_math.py), policy_gradient.py's SYNC001 lines in a live
# run, and `perfaudit verify --each` of its fixes on the GPU.
#
#   bash benchmarks/record_amp_on_gpu.sh OUT_DIR
#
# Leaves OUT_DIR/plain_amp.json, OUT_DIR/runs.tar.gz (reports, console output, verify's) and summary.txt.
set -u
OUT=${1:?OUT_DIR}
W=/tmp/amp_runs; rm -rf "$W"; mkdir -p "$W" "$OUT"
. benchmarks/gpu_env.sh
{ date -u; uptime; nvidia-smi --query-gpu=name --format=csv,noheader; } | tee "$OUT/summary.txt"
timeout 100 python3 benchmarks/gpu_plain_steps.py "$OUT/plain_amp.json" tests/realistic/fp16_scaler_trainer.py \
  tests/realistic/text_classifier.py sample_scripts/amp_good.py 2>&1 | cut -c1-160 | tee -a "$OUT/summary.txt"
for s in tests/realistic/fp16_scaler_trainer.py tests/realistic/text_classifier.py tests/realistic/policy_gradient.py; do
  n=$(basename "$s" .py)
  timeout 100 python3 -m perfaudit run "$s" --out-dir "$W/$n" -f json="$W/$n.json" > "$W/$n.txt" 2>&1
  echo "run rc=$? $s" | tee -a "$OUT/summary.txt"
done
python3 - "$W" >> "$OUT/summary.txt" <<'PY'
import json, sys
from pathlib import Path
for p in sorted(Path(sys.argv[1]).glob("*.json")):
    d = json.loads(p.read_text())
    pr, m = d.get("projection") or {}, d.get("memory") or {}
    print(p.stem, "step", d["run"].get("step_ms"), "busy", pr.get("busy_ms"), "peak", m.get("peak_allocated_bytes"),
          [(f["rule"], [loc["line"] for loc in f["locations"]]) for f in d["findings"]])
PY
timeout 200 python3 -m perfaudit verify tests/realistic/policy_gradient.py --each --rounds 2 --max-time 30 \
  --end-check 10 > "$W/verify.txt" 2>&1
echo "verify rc=$?" | tee -a "$OUT/summary.txt"; tail -40 "$W/verify.txt" >> "$OUT/summary.txt"
(cd /tmp && tar czf "$OUT/runs.tar.gz" --exclude='*.html' amp_runs)
cat "$OUT/summary.txt"
