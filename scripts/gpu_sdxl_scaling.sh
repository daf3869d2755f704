#!/usr/bin/env bash
# On a GPU machine with 4 or 8 H200s (device tool: nvidia-h200-x4 / -x8): profile sdxl-unet on
# GPUS (default 1,2,4,8) x BATCH per GPU through the real runner, write the measured profile, and
# compare the 1-2-GPU fit's predictions at 4 and 8 GPUs with the measurements, under the shipped H200
# runner settings (RUNTIME, default compile=blocks; one compile cache shared by the runs). Wheels for
# simpy/diffusers/importlib_metadata come in .whl/ (see the device README).
set -uo pipefail
GPUS=${GPUS:-1,2,4,8}; BATCH=${BATCH:-8}; STEPS=${STEPS:-30}; RUNTIME=${RUNTIME:---runtime compile=blocks}; OUT=${OUT:-/tmp/out}; ROOT=${ROOT:-/tmp/sdxl-scaling}
export PYTHONUNBUFFERED=1
trap 'python3 scripts/scaling_report.py "$ROOT" > "$OUT/scaling.txt" 2>&1; python3 scripts/scaling_report.py "$ROOT" --json > "$OUT/scaling.json" 2>/dev/null; tar czf "$OUT/runs.tgz" -C "$ROOT" --exclude checkpoints . 2>/dev/null' EXIT
source scripts/gpu_site.sh
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpus.txt"
rm -rf "$ROOT"
# shellcheck disable=SC2086
TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-scaling python3 -m runner profile --workload sdxl --gpu H200 --gpus "$GPUS" \
  --batch "$BATCH" --steps "$STEPS" $RUNTIME --out "$OUT/sdxl-unet-h200-measured.yaml" --run-root "$ROOT" > "$OUT/profile.log" 2>&1
echo "runner profile exit $?"
