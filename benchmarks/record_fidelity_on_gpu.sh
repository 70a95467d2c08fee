#!/usr/bin/env bash
# Which rules a real GPU run fires on the realistic and sample scripts, against the lines each script marks, and
# the nine projection references' plain steps again (a second H200/H100 reading: how far the GPU host's own steps
# move run to run). One call of a lent machine:
#
#   bash benchmarks/record_fidelity_on_gpu.sh OUT_DIR [DEADLINE_S] SCRIPT...
#
# Leaves in OUT_DIR: env.txt, plain_steps.json (benchmarks/gpu_plain_steps.py), runs/NAME.json (each script's
# report), traces.tar.gz.partNN (their run folders, split) and fidelity.txt (benchmarks/gpu_fidelity.py). Scripts run three at a
# time after the plain steps (which run alone), until DEADLINE_S seconds have passed.
set -u
OUT=${1:?OUT_DIR}; DEADLINE=${2:-300}; shift 2
START=$(date +%s)
W=/tmp/fid; rm -rf "$W"; mkdir -p "$W/runs" "$OUT"
. benchmarks/gpu_env.sh
{ date -u; uptime; nproc; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda)"; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout 150 python3 benchmarks/gpu_plain_steps.py "$OUT/plain_steps.json" \
  tests/realistic/augmented_images.py tests/realistic/char_transformer.py tests/realistic/cnn_classifier.py \
  tests/realistic/vae.py tests/realistic/device_built_lm.py tests/realistic/cuda_path_trainer.py \
  tests/realistic/cuda_transforms_loader.py sample_scripts/clean_loop.py sample_scripts/amp_bad.py 2>&1 | cut -c1-200
echo "plain steps done at $(( $(date +%s) - START )) s"
one() {
  local s=$1 name; name=$(basename "$s" .py)
  if [ $(( $(date +%s) - START )) -gt "$DEADLINE" ]; then echo "skipped (deadline) $s"; return; fi
  timeout -k 5 120 python3 -m perfaudit run "$s" --out-dir "$W/$name" -f json="$W/runs/$name.json" > "$W/$name.txt" 2>&1
  echo "rc=$? $s"
}
export -f one; export W START DEADLINE
printf '%s\n' "$@" | xargs -P 3 -I{} bash -c 'one {}'
echo "runs done at $(( $(date +%s) - START )) s"
cp -r "$W/runs" "$OUT/"
(cd "$W" && tar czf - --exclude='*.html' *.txt */) 2>/dev/null | split -b 15m -d - "$OUT/traces.tar.gz.part"
rm -f "$OUT"/traces.tar.gz.part0[4-9]  # what can come back: the first four parts
python3 benchmarks/gpu_fidelity.py "$OUT/runs" | tee "$OUT/fidelity.txt"
ls -la "$OUT"
