#!/usr/bin/env bash
# On the GPU machine (device tool): the notice rule (costsim.contract.notice) on the flagship state
# (30.8 GB), three lives of one run folder side by side in one call:
#   1. the shipped plan with an async checkpoint every 8 steps, SIGTERM to `runner execute` once step
#      FLIGHT is done (the write of step 16 in flight, 2 steps since it): the rule keeps that write and
#      exits when it lands (notice_save auto);
#   2. the same, resumed, with --notice-save always (the runner before the rule): the write in flight,
#      then a second save, then the exit; SIGTERM once step FLIGHT2 is done;
#   3. the plan as written (no periodic save in these steps), resumed, SIGTERM once step SAVE is done:
#      many steps since the newest checkpoint, the rule saves.
# Each life's notice-to-exit and decision in notes.txt, their output in lives.txt; the telemetry without
# its step events, the summary and `runner report`.
# Wheels in .whl/ (simpy, diffusers, importlib_metadata).
set -uo pipefail
STEPS=${STEPS:-50}; FLIGHT=${FLIGHT:-18}; FLIGHT2=${FLIGHT2:-26}; SAVE=${SAVE:-40}; OUT=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
source scripts/gpu_site.sh
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; df -h /tmp; nproc
  python3 -c 'import torch; print(torch.__version__)'; } > "$OUT/machine.txt" 2>&1
python3 -m costsim plan --workload sdxl --gpu H200 --out /tmp/plan.json > "$OUT/plan.txt" 2>&1
python3 - <<'EOF'
import json
doc = json.load(open("/tmp/plan.json"))
doc["checkpoint"].update(interval_steps=8, **{"async": True})
json.dump(doc, open("/tmp/plan8.json", "w"), indent=1)
EOF
reached() {   # whether rank 0 has reported step $1 (progress events, every few steps)
  python3 -c "import json,sys; print(max((e.get('step', 0) for e in map(json.loads, open('/tmp/run/telemetry.jsonl'))
    if e.get('event') in ('progress', 'step') and e.get('rank') == 0), default=0) >= int(sys.argv[1]))" "$1" 2>/dev/null \
    | grep -q True
}
life() {   # $1 plan, $2 notice step, $3 log name, rest: runner execute options
  local plan=$1 at=$2 log=$3; shift 3
  echo "== $log" >> "$OUT/lives.txt"
  python3 -m runner execute "$plan" --run-dir /tmp/run --steps "$STEPS" "$@" >> "$OUT/lives.txt" 2>&1 &
  local pid=$! sent=""
  for _ in $(seq 2000); do
    if [ -z "$sent" ] && reached "$at"; then sent=$(date +%s.%N); kill -TERM $pid; fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  kill -0 $pid 2>/dev/null && kill -KILL $pid
  wait $pid; local code=$?
  echo "$log: exit $code; notice to exit $(python3 -c "import time; print(round(time.time() - ${sent:-0}, 1))") s" \
    | tee -a "$OUT/notes.txt"
}
rm -rf /tmp/run   # a warm machine keeps an earlier call's run folder
life /tmp/plan8.json "$FLIGHT" life1-auto-in-flight.txt
life /tmp/plan8.json "$FLIGHT2" life2-always-in-flight.txt --notice-save always
life /tmp/plan.json "$SAVE" life3-auto-save.txt
python3 -m runner report /tmp/run > "$OUT/report.txt" 2>&1
grep -v '"event":"step"' /tmp/run/telemetry.jsonl > "$OUT/telemetry.jsonl"; cp /tmp/run/summary.json "$OUT/"
grep '"preempted"' /tmp/run/telemetry.jsonl | grep '"rank":0' >> "$OUT/notes.txt"
