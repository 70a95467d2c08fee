#!/usr/bin/env bash
# Record perfaudit runs of the sample and realistic scripts on a real GPU, in one call of a lent machine.
#
#   bash benchmarks/record_on_gpu.sh OUT_DIR [DEADLINE_S]
#
# What it leaves in OUT_DIR: gpu_runs.tar.gz.partNN (each script's run folder: trace, report.json, log),
# env.txt (the machine, its load, torch) and summary.tsv (one line a script: exit code, measured step,
# projection, rules fired). Group A (the scripts the projection is checked against: a CPU run here is projected
# onto this GPU and compared with these traces) runs one script at a time on an otherwise idle GPU; group B (the
# fixtures and the emulation's fidelity check: which rules a real GPU run fires) runs three at a time, so its
# step times are not comparable and are not used. Scripts are run until DEADLINE_S seconds have passed.
# Wheels the device image lacks are installed from .whl/ (see docs/accuracy.md "Recorded on a GPU").
set -u
OUT=${1:?OUT_DIR}
DEADLINE=${2:-330}
START=$(date +%s)
W=/tmp/gpu_runs
rm -rf "$W"; mkdir -p "$W/A" "$W/B" "$OUT"
. benchmarks/gpu_env.sh
{
  date -u; uptime; nproc; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0))"
  python3 -m perfaudit --version
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

record() {  # record GROUP SCRIPT: one perfaudit run on the GPU into $W/GROUP/NAME
  local g=$1 s=$2 name
  name=$(basename "$(dirname "$s")")_$(basename "$s" .py)
  if [ $(( $(date +%s) - START )) -gt "$DEADLINE" ]; then echo "skipped (deadline) $s"; return; fi
  local t0=$(date +%s.%N)
  timeout -k 5 150 python3 -m perfaudit run "$s" --out-dir "$W/$g/$name" -f console -f json="$W/$name.json" \
    > "$W/$name.console.txt" 2>&1
  local rc=$?
  echo "$rc $(python3 -c "import time; print(round(time.time()-$t0, 1))") $s" >> "$W/rc.txt"
  echo "done rc=$rc $s"
}
export -f record
export W START DEADLINE

# Group A: alone on the GPU, in this order.
for s in tests/realistic/augmented_images.py tests/realistic/char_transformer.py sample_scripts/data_bad.py \
         tests/realistic/cnn_classifier.py tests/realistic/vae.py tests/realistic/device_built_lm.py \
         tests/realistic/cuda_path_trainer.py tests/realistic/cuda_transforms_loader.py \
         sample_scripts/data_slow_workers.py sample_scripts/clean_loop.py sample_scripts/amp_bad.py; do
  record A "$s"
done
echo "group A done at $(( $(date +%s) - START )) s"

# Group B: three at a time.
printf '%s\n' sample_scripts/sync_bad.py sample_scripts/sync_good.py sample_scripts/copy_bad.py sample_scripts/copy_good.py \
  sample_scripts/cudnn_varying_bad.py sample_scripts/cudnn_good.py sample_scripts/zero_grad_bad.py \
  sample_scripts/host_tensor_bad.py sample_scripts/host_tensor_good.py sample_scripts/empty_cache_bad.py \
  sample_scripts/empty_cache_good.py sample_scripts/optim_bad.py sample_scripts/optim_good.py sample_scripts/amp_good.py \
  sample_scripts/data_good.py sample_scripts/sync_forms_bad.py sample_scripts/bias_bn_bad.py sample_scripts/debug_bad.py \
  sample_scripts/varying_shapes_bad.py sample_scripts/zero_grad_good.py \
  tests/realistic/cuda_legacy_loop.py tests/realistic/cuda_legacy_rnn.py tests/realistic/fused_on_cuda.py \
  tests/realistic/gpu_resident_dataset.py tests/realistic/trainer_next_iter.py tests/realistic/transformer_mask.py \
  tests/realistic/host_tensors.py tests/realistic/gan.py tests/realistic/wgan_critic.py tests/realistic/lstm_lm.py \
  tests/realistic/streamed_batches.py tests/realistic/cuda_config_device.py tests/realistic/dataset_transforms.py \
  tests/realistic/seeded_cnn.py tests/realistic/multi_gpu_guard.py tests/realistic/cuda_opt_in_flag.py \
  sample_scripts/compile_good.py sample_scripts/compile_break_bad.py \
  | xargs -P 3 -I{} bash -c 'record B {}'
echo "group B done at $(( $(date +%s) - START )) s"

python3 - "$W" > "$OUT/summary.tsv" <<'EOF'
import json, sys
from pathlib import Path
w = Path(sys.argv[1])
print("name\tstep_ms\tdevice\tprojected_ms\tbottleneck\tdata_share\tgpu_busy\trules")
for p in sorted(w.glob("*.json")):
    try:
        d = json.loads(p.read_text())
    except ValueError:
        print(f"{p.stem}\tunreadable"); continue
    r, pr = d.get("run") or {}, d.get("projection") or {}
    rules = ",".join(sorted({f.get("rule", "?") for f in d.get("findings", [])}))
    print(f"{p.stem}\t{r.get('step_ms')}\t{r.get('device')}\t{pr.get('step_ms')}\t{pr.get('bottleneck')}\t"
          f"{pr.get('data_share')}\t{pr.get('gpu_busy_share')}\t{rules}")
EOF
cp "$W/rc.txt" "$OUT/rc.txt"
# Small files first, then group A's run folders, then B's: if the archive outgrows the five parts that can
# come back, what is cut is B's last traces.
(cd /tmp && tar czf - --exclude=report.html gpu_runs/*.json gpu_runs/*.txt gpu_runs/A gpu_runs/B) \
  | split -b 15m -d - /tmp/gpu_runs.tar.gz.part
ls -la /tmp/gpu_runs.tar.gz.part*
for p in $(ls /tmp/gpu_runs.tar.gz.part* | head -5); do cp "$p" "$OUT/"; done
ls -la "$OUT"
cut -c1-220 "$OUT/summary.tsv"
