#!/usr/bin/env bash
# On the GPU machine (device tool, nvidia-h200-x2): the sdxl-unet workload through `runner execute`
# on 2 H200s for a few hundred steps, async checkpoints every INTERVAL steps, one injected SIGKILL,
# resume; then the run report. Wheels for simpy/diffusers/importlib_metadata come in .whl/.
set -uo pipefail
STEPS=${STEPS:-200}; INTERVAL=${INTERVAL:-50}; KILL=${KILL:-140}; BATCH=${BATCH:-8}; LIMIT=${LIMIT:-450}
OUT=${OUT:-/tmp/out}; RUN=${RUN:-/tmp/sdxl-run}
export PYTHONUNBUFFERED=1
# Whatever happens, bring back the telemetry and the report.
trap 'cp "$RUN/telemetry.jsonl" "$RUN/summary.json" "$OUT/" 2>/dev/null; python3 scripts/report_run.py "$RUN" > "$OUT/report.txt" 2>&1' EXIT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpus.txt"
python3 -c "import torch, diffusers; print('torch', torch.__version__, 'diffusers', diffusers.__version__)" | tee -a "$OUT/gpus.txt"
df -h /tmp | tail -1 | tee -a "$OUT/gpus.txt"
date +%T; python3 -m costsim plan --workload sdxl --gpu H200 --trials 20 --jobs 4 --out /tmp/plan.json --format json > /dev/null; date +%T
python3 - "$BATCH" "$INTERVAL" <<'PY'
import json, sys
plan = json.load(open("/tmp/plan.json"))
plan["resources"].update(gpus_per_node=2, nodes=1)
plan["workload"]["global_batch"] = int(sys.argv[1])
plan["prediction"]["accumulation"] = 1
plan["checkpoint"].update(interval_steps=int(sys.argv[2]), keep=2, **{"async": True})
json.dump(plan, open("/tmp/plan.json", "w"), indent=1)
PY
rm -rf "$RUN"
timeout "$LIMIT" python3 -m runner execute /tmp/plan.json --run-dir "$RUN" --steps "$STEPS" \
  --inject-preemptions "kill@$KILL" > "$OUT/log.txt" 2>&1
echo "runner exit $?"; date +%T
python3 scripts/report_run.py "$RUN" --json > "$OUT/report.json"
