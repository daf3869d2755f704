#!/usr/bin/env bash
# On the GPU machine (device tool, nvidia-h200-x2): the shipped SDXL plan carried out by
# `costsim control` on the local backend, real SDXL steps, checkpoints and restarts on this node's GPUs.
#   1. `costsim plan --workload sdxl --gpu H200` as written (8 x H200 p5en, global batch 64)
#   2. a drill trace (60 s ticks): spot for 20 ticks, gone for 2, then back
#   3. `costsim control plan.json --policy greedy --trace T --time-scale 6` (a tick is 10 s of wall
#      time; the 10 min notice 100 s, room for the ~36 s emergency save), eager runner settings
#      (the plan's compile=model would spend minutes compiling on this fresh machine), STEPS steps
# Everything lands in $OUT (control.json, the plot, telemetry, logs). Wheels in .whl/.
set -uo pipefail
STEPS=${STEPS:-60}; DEADLINE=${DEADLINE:-42m}; LIMIT=${LIMIT:-500}; OUT=${OUT:-/tmp/out}; RUN=/tmp/control-run
export PYTHONUNBUFFERED=1
source scripts/gpu_site.sh
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/setup.txt"   # 8 files come back: keep to 8
python3 -m costsim plan --workload sdxl --gpu H200 --trials 100 --jobs 4 --out /tmp/plan.json >> "$OUT/setup.txt" 2>&1
cp /tmp/plan.json "$OUT/plan.json"
python3 -c 'import json; json.dump({"metadata": {"gap_seconds": 60}, "data": [0] * 20 + [1] * 2 + [0] * 300},
                                    open("/tmp/trace.json", "w"))'
rm -rf "$RUN"
# At the end: the journal, and one archive of the telemetry and the runner's log (the tool brings back 8 files).
trap 'cp "$RUN/control.json" "$OUT/" 2>/dev/null; python3 -m runner report "$RUN" > "$OUT/report.txt" 2>&1; tar czf "$OUT/run.tgz" -C "$RUN" telemetry.jsonl runner.log plan.json 2>/dev/null' EXIT
date +%T
timeout -k 90 "$LIMIT" python3 -m costsim control /tmp/plan.json --policy greedy --trace /tmp/trace.json \
  --time-scale 6 --deadline "$DEADLINE" --notice 10m --steps "$STEPS" --poll 1s --runtime compile=off \
  --run-dir "$RUN" --plot "$OUT/control.png" > "$OUT/control.txt" 2> "$OUT/control-stderr.txt"
echo "control exit $?"; date +%T
cat "$OUT/control.txt"
