#!/usr/bin/env bash
# On a lent GPU: the OOM watch on a script that runs out of memory (the snapshot fixture for tests/test_oom.py
# and a `perfaudit run` of it), `perfaudit run` on the conv nets (the memory of their warm-up steps, with the
# OOM watch's history on before them), and the conv nets' plain peaks from step 2 on (without the first step's
# cudnn.benchmark search): how much of the emulated estimate's miss is cuDNN's workspaces in every step.
#
#   bash benchmarks/record_oom_on_gpu.sh OUT_DIR
set -u
OUT=${1:?OUT_DIR}
mkdir -p "$OUT"
. benchmarks/gpu_env.sh
{ date -u; uptime; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout 100 python3 benchmarks/gpu_oom_fixture.py "$OUT/oom_snapshot.json.gz" 2>&1 | tail -8 | cut -c1-400
timeout 120 python3 -m perfaudit run benchmarks/gpu_scripts/big_vocab_lm.py --out-dir /tmp/oomrun -f console \
  -f json="$OUT/oom_run.json" > "$OUT/oom_run.console.txt" 2>&1
echo "perfaudit rc=$?"; tail -22 "$OUT/oom_run.console.txt" | cut -c1-300
for s in tests/realistic/cnn_classifier.py sample_scripts/clean_loop.py tests/realistic/augmented_images.py; do
  name=$(basename "$s" .py)
  timeout 100 python3 -m perfaudit run "$s" --out-dir "/tmp/run_$name" -f console -f json="$OUT/run_$name.json" \
    > "$OUT/run_$name.console.txt" 2>&1
  echo "perfaudit rc=$? $s"; grep -A3 "│ memory" "$OUT/run_$name.console.txt" | cut -c1-200
done
PLAIN_STEPS_RESET_AFTER_FIRST=1 timeout 120 python3 benchmarks/gpu_plain_steps.py "$OUT/plain_from_step2.json" \
  tests/realistic/cnn_classifier.py sample_scripts/clean_loop.py tests/realistic/augmented_images.py \
  sample_scripts/amp_good.py tests/realistic/vae.py | cut -c1-300
ls -la "$OUT"
