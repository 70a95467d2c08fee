#!/usr/bin/env bash
# The second recording on a lent GPU (after record_on_gpu.sh): each CUDA-path script run plainly (no profiler,
# no perfaudit: its step time and torch's memory peaks, benchmarks/gpu_plain_steps.py), `perfaudit run` with
# the GPU memory probe on four scripts, and a real allocator history for the probe's test.
#
#   bash benchmarks/record_plain_on_gpu.sh OUT_DIR
set -u
OUT=${1:?OUT_DIR}
mkdir -p "$OUT" /tmp/mem
. benchmarks/gpu_env.sh
uptime
timeout 60 python3 benchmarks/gpu_memory_fixture.py "$OUT/allocator_history_h100.json.gz" 2>&1 | tail -3
for s in tests/realistic/vae.py tests/realistic/char_transformer.py tests/realistic/device_built_lm.py \
         sample_scripts/amp_bad.py; do
  name=$(basename "$s" .py)
  timeout 90 python3 -m perfaudit run "$s" --out-dir "/tmp/mem/$name" -f console -f json="/tmp/mem/$name.json" \
    > "/tmp/mem/$name.console.txt" 2>&1
  echo "perfaudit rc=$? $s"; grep -A2 "memory" "/tmp/mem/$name.console.txt" | head -4
done
(cd /tmp && tar czf "$OUT/mem_runs.tar.gz" mem/*.json mem/*.txt)
timeout 240 python3 benchmarks/gpu_plain_steps.py "$OUT/plain_steps.json" \
  tests/realistic/augmented_images.py tests/realistic/char_transformer.py tests/realistic/cnn_classifier.py \
  tests/realistic/vae.py tests/realistic/device_built_lm.py tests/realistic/cuda_path_trainer.py \
  tests/realistic/cuda_transforms_loader.py sample_scripts/clean_loop.py sample_scripts/amp_bad.py \
  tests/realistic/cuda_legacy_loop.py tests/realistic/cuda_legacy_rnn.py tests/realistic/fused_on_cuda.py \
  tests/realistic/gpu_resident_dataset.py tests/realistic/trainer_next_iter.py tests/realistic/host_tensors.py \
  sample_scripts/sync_bad.py sample_scripts/copy_bad.py sample_scripts/optim_bad.py sample_scripts/amp_good.py \
  sample_scripts/cudnn_varying_bad.py sample_scripts/host_tensor_bad.py sample_scripts/empty_cache_bad.py \
  | cut -c1-260
ls -la "$OUT"
