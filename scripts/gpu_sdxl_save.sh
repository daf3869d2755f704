#!/usr/bin/env bash
# On the GPU machine (device tool): the spot notice's save of the flagship state (30.8 GB), side by side.
#   1. scripts/bench_checkpoint.py --notice: the blocking save from the device tensors (the runner before
#      2026-12-01) and from the host staging buffers, at 4 and 16 writer threads, then the disk's raw
#      write bound at the same thread counts; every figure as a ratio to the first.
#   2. The shipped plan as written: `costsim plan --workload sdxl --gpu H200`, then `runner execute
#      plan.json --steps STEPS`, SIGTERM to `runner execute` once step NOTICE is done: the notice-to-exit
#      time and the emergency save's event (staged or not, writer threads, commit).
#   3. The same command again on that run folder, SIGTERM once step RESUME is done: the restart from
#      the emergency checkpoint with the first run's compile cache (restart_phases_s in the report),
#      and a second notice.
# PART=bench runs 1 only, PART=notice 2 and 3 (each fits one device call); default: all. KEEP_RUN=1 brings the
# run folder back whole (telemetry with its step events, plan.json, summary.json) for `costsim calibrate`.
# Everything lands in $OUT. Wheels in .whl/ (simpy, diffusers, importlib_metadata).
set -uo pipefail
STEPS=${STEPS:-30}; NOTICE=${NOTICE:-10}; RESUME=${RESUME:-14}; PART=${PART:-all}; OUT=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
source scripts/gpu_site.sh
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; df -h /tmp; nproc
  python3 -c 'import torch; print(torch.__version__)'; } > "$OUT/machine.txt" 2>&1
date +%T
if [ "$PART" != notice ]; then
timeout -k 20 400 python3 scripts/bench_checkpoint.py --workload sdxl --batch 8 --notice 4,16 --dir /tmp/bench \
  > "$OUT/bench.jsonl" 2> "$OUT/bench.err"
echo "bench exit $?"; date +%T; rm -rf /tmp/bench
fi
[ "$PART" = bench ] && exit 0
python3 -m costsim plan --workload sdxl --gpu H200 --out /tmp/plan.json > "$OUT/plan.txt" 2>&1
echo "plan exit $?"
reached() {   # whether a progress event of this run folder has reached step $1 (progress comes every 2 steps)
  python3 -c "import json,sys; print(max((e.get('step', 0) for e in map(json.loads, open('/tmp/run/telemetry.jsonl'))
    if e.get('event') == 'progress'), default=0) >= int(sys.argv[1]))" "$1" 2>/dev/null | grep -q True
}
notice() {   # $1 step, $2 log: SIGTERM to runner execute once step $1 is done (as a spot agent would)
  python3 -m runner execute /tmp/plan.json --run-dir /tmp/run --steps "$STEPS" > "$OUT/$2" 2>&1 &
  local pid=$! sent=""
  for _ in $(seq 1600); do
    if [ -z "$sent" ] && reached "$1"; then
      sent=$(date +%s.%N); kill -TERM $pid
    fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.25
  done
  kill -0 $pid 2>/dev/null && kill -KILL $pid
  wait $pid; local code=$?
  echo "$2: exit $code; notice to exit $(python3 -c "import time; print(round(time.time() - ${sent:-0}, 1))") s"
  date +%T
}
rm -rf /tmp/run   # a warm machine keeps an earlier call's run folder
notice "$NOTICE" execute.txt
notice "$RESUME" resume.txt
python3 -m runner report /tmp/run > "$OUT/report.txt" 2>&1
if [ -n "${KEEP_RUN:-}" ]; then   # the run folder's record, step events and all, for `costsim calibrate` here
  mkdir -p "$OUT/run" && cp /tmp/run/telemetry.jsonl /tmp/run/plan.json /tmp/run/summary.json "$OUT/run/"
else
  grep -v '"event":"step"' /tmp/run/telemetry.jsonl > "$OUT/telemetry.jsonl" 2>/dev/null
fi
