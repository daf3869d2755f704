#!/usr/bin/env bash
# On the GPU machine (device tool): the shipped SDXL plan as a user runs it, end to end.
#   `costsim plan --workload sdxl --gpu H200` as written, then `runner execute plan.json` on the GPUs this
#   node has (the plan's settings; the global batch kept by accumulation), STEPS steps with a spot notice
#   (SIGTERM) at NOTICE: the emergency checkpoint, the restart from it, the final save; then `runner
#   report` and `costsim calibrate` read the run folder back.
# EXECUTE_ARGS: more arguments for `runner execute` (split on spaces), e.g. "--runtime compile_mode=reduce-overhead";
# RUN_DIR (default /tmp/run): the run folder, emptied first (a warm machine's earlier run would be resumed, and its
# checkpoints fill the 64 GB disk). EXECUTE_TIMEOUT (default 420): seconds `runner execute` may run (a whole-model
# compile from an empty cache takes about 310 s of it on an H100).
# Everything lands in $OUT. Wheels (simpy, diffusers, accelerate, safetensors, psutil, importlib_metadata) in .whl/.
set -uo pipefail
STEPS=${STEPS:-24}; NOTICE=${NOTICE:-12}; OUT=${OUT:-/tmp/out}; RUN_DIR=${RUN_DIR:-/tmp/run}
EXECUTE_TIMEOUT=${EXECUTE_TIMEOUT:-420}
rm -rf "$RUN_DIR"
export PYTHONUNBUFFERED=1
source scripts/gpu_site.sh
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpus.txt"
python3 -c 'import torch, diffusers; print("torch", torch.__version__, "diffusers", diffusers.__version__)' >> "$OUT/gpus.txt"
date +%T
python3 -m costsim plan --workload sdxl --gpu H200 --jobs 4 --out /tmp/plan.json > "$OUT/plan.txt" 2>&1
echo "plan exit $?"; cp /tmp/plan.json "$OUT/plan.json"; date +%T
# a card under 100 GB (an H100) does not hold the plan's micro-batch of 8 under compile=blocks: 4 there, the global
# batch kept by accumulation (MICRO_BATCH sets it; the plan's own on an H200)
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [[ -z ${MICRO_BATCH:-} ]] && (( mib < 100000 )); then MICRO_BATCH=4; fi
if [[ -n ${MICRO_BATCH:-} ]]; then
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); d["prediction"]["per_gpu_batch"] = int(sys.argv[2])
json.dump(d, open(sys.argv[1], "w"), indent=1)' /tmp/plan.json "$MICRO_BATCH"
  echo "micro-batch $MICRO_BATCH (GPU memory $mib MiB)" | tee -a "$OUT/gpus.txt"
fi
# shellcheck disable=SC2086
timeout -k 30 "$EXECUTE_TIMEOUT" python3 -m runner execute /tmp/plan.json --run-dir "$RUN_DIR" --steps "$STEPS" \
  --inject-preemptions "term@$NOTICE" ${EXECUTE_ARGS:-} > "$OUT/execute.txt" 2>&1
echo "execute exit $?"; date +%T
python3 -m runner report "$RUN_DIR" > "$OUT/report.txt" 2>&1
python3 -m costsim calibrate "$RUN_DIR" --out /tmp/calibrated.yaml > "$OUT/calibrate.txt" 2>&1
echo "calibrate exit $?"
# the run folder less its checkpoints and export: plan.json (the effective plan), telemetry, summary
tar czf "$OUT/run.tgz" -C "$RUN_DIR" --exclude=checkpoints --exclude=final --exclude=pycache .
date +%T
