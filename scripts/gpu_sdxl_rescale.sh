#!/usr/bin/env bash
# On the GPU machine (device tool, nvidia-h200-x2): the shipped SDXL plan as written, on the GPUs the
# machine has, not the 8 it was made for.
#   PART=rescale (default)
#     1. `costsim plan --workload sdxl --gpu H200` (it chooses 8 x H200 at 8 per GPU, global batch 64)
#     2. `runner execute plan.json --steps STEPS` with nothing else: this node's 2 GPUs, micro-batch 8 x 4
#     3. the same run folder on 1 GPU (CUDA_VISIBLE_DEVICES=0) to step STEPS + MORE: micro-batch 8 x 8,
#        resumed from step STEPS's checkpoint (a world-size change on real GPUs)
#     4. the micro-step it accumulates, measured alone: `runner profile` at 8 per GPU on 1 GPU
#   PART=long: the fastest configuration (the profile's H200 main entry, compile=model, 16 per GPU on
#     2 GPUs, async checkpoints every INTERVAL steps) for LONG steps: does its 139 GB peak hold?
# Everything lands in $OUT: logs, telemetry, summaries and runner report's reports.
# Wheels for simpy/diffusers/importlib_metadata come in .whl/.
set -uo pipefail
PART=${PART:-rescale}; STEPS=${STEPS:-30}; MORE=${MORE:-15}; LONG=${LONG:-150}; INTERVAL=${INTERVAL:-50}
LIMIT=${LIMIT:-540}   # PART=long: then SIGTERM (the spot notice: an emergency checkpoint), SIGKILL 60 s later
OUT=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
source scripts/gpu_site.sh
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor   # one compile cache for every run of the call
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpus.txt"
python3 -c 'import torch, diffusers; print("torch", torch.__version__, "diffusers", diffusers.__version__)' | tee -a "$OUT/gpus.txt"

report() {   # run folder, name
  cp "$1/telemetry.jsonl" "$OUT/$2-telemetry.jsonl" 2>/dev/null
  cp "$1/summary.json" "$OUT/$2-summary.json" 2>/dev/null
  python3 -m runner report "$1" > "$OUT/$2-report.txt" 2>&1
}

if [[ "$PART" == rescale ]]; then
  python3 -m costsim plan --workload sdxl --gpu H200 --trials 100 --jobs 4 --out /tmp/plan.json > "$OUT/plan.txt" 2>&1
  cp /tmp/plan.json "$OUT/plan.json"
  date +%T
  # As written: no --nproc-per-node; the runner takes this node's GPUs and keeps the plan's micro-batch.
  timeout -k 60 300 python3 -m runner execute /tmp/plan.json --run-dir /tmp/rescale --steps "$STEPS" \
    > "$OUT/gpus2.log" 2>&1
  echo "2 GPUs: exit $?"; date +%T
  report /tmp/rescale gpus2
  # The same job goes on on one GPU: the same global batch, twice the accumulation.
  CUDA_VISIBLE_DEVICES=0 timeout -k 60 240 python3 -m runner execute /tmp/plan.json --run-dir /tmp/rescale \
    --steps $((STEPS + MORE)) > "$OUT/gpus1.log" 2>&1
  echo "1 GPU: exit $?"; date +%T
  report /tmp/rescale gpus1
  # The micro-step alone: 8 per GPU, accumulation 1, one GPU, the plan's runner settings.
  RUNTIME=$(python3 -c 'import json; r = json.load(open("/tmp/plan.json"))["runtime"]
print(" ".join(f"--runtime {k}={str(v).lower()}" for k, v in r.items()))')
  # shellcheck disable=SC2086
  timeout -k 30 150 python3 -m runner profile --workload sdxl --gpu H200 --gpus 1 --batch 8 --steps 20 $RUNTIME \
    --out "$OUT/micro-profile.yaml" --run-root /tmp/micro > "$OUT/micro.log" 2>&1
  echo "micro-step: exit $?"; date +%T
  report /tmp/micro/gpus1-batch8 micro
fi

if [[ "$PART" == long ]]; then
  python3 - "$INTERVAL" <<'PY'
import json, subprocess, sys
subprocess.run([sys.executable, "-m", "costsim", "plan", "--workload", "sdxl", "--gpu", "H200", "--trials", "50",
                "--out", "/tmp/plan.json", "--format", "json"], check=True, stdout=subprocess.DEVNULL)
plan = json.load(open("/tmp/plan.json"))
# The profile's main H200 configuration (whole-model compilation at 16 per GPU) on this node's 2 GPUs.
import yaml
entry = yaml.safe_load(open("data/profiles/sdxl-unet.yaml"))["gpus"]["H200"]
plan["runtime"] = entry["runtime"]
plan["workload"]["global_batch"] = 32
plan["resources"].update(gpus_per_node=2, nodes=1)
plan["prediction"].update(per_gpu_batch=16, accumulation=1)
plan["profile"]["variant"] = None
plan["checkpoint"].update(interval_steps=int(sys.argv[1]), keep=1, **{"async": True})   # 31 GB each
json.dump(plan, open("/tmp/plan-long.json", "w"), indent=1)
PY
  cp /tmp/plan-long.json "$OUT/plan-long.json"
  date +%T
  timeout -k 60 "$LIMIT" python3 -m runner execute /tmp/plan-long.json --run-dir /tmp/long --steps "$LONG" \
    > "$OUT/long.log" 2>&1
  echo "long: exit $?"; date +%T
  report /tmp/long long
fi
