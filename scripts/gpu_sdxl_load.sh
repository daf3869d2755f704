#!/usr/bin/env bash
# On the GPU machine (device tool, nvidia-h200-x2): the checkpoint load into the GPUs, one call (~450 s).
#  1. scripts/bench_load.py on both GPUs at once (as the ranks of a restart load): a rank's share of the
#     SDXL state (15.4 GB in 6 MB tensors), DCP's reader against the runner's with a pageable copy into
#     the GPU and through its pinned buffers                                                  ~90 s
#  2. the eager SDXL UNet at 8 per GPU through `runner execute` (no compilation, so no compile cache
#     is needed): 100 steps, async checkpoints every 25, SIGKILL at step 85 (step 25's checkpoint is
#     complete); then the same run folder again to step 120, SIGKILLed at 108: both its starts load
#     step 100. Each load's phases are in the run reports                                     ~330 s
# Results in $OUT: load-gpu0.txt, load-gpu1.txt, drill.tgz, again.tgz, reports.txt. Wheels come in .whl/.
set -uo pipefail
OUT=${OUT:-/tmp/out}; RUN=/tmp/sdxl-run
SETTINGS="--runtime compile=off --runtime ddp_graph=split --runtime expandable_segments=false --runtime gc_every=50 --runtime ddp_bucket_mb=200"   # over the plan's compile=model
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for gpu in 0 1; do
  CUDA_VISIBLE_DEVICES=$gpu timeout -k 10 200 python3 scripts/bench_load.py --gb 15.4 --tensor-mb 6 --device cuda \
    --threads 8 --rounds 2 --dir "/tmp/bench-load-$gpu" > "$OUT/load-gpu$gpu.txt" 2>&1 &
done
wait
tail -5 "$OUT"/load-gpu*.txt
rm -rf /tmp/bench-load-*

mkdir -p /tmp/drill
OUT=/tmp/drill PROFILE=0 BATCH=8 STEPS=100 INTERVAL=25 KILL=85 LIMIT=230 RUNTIME="$SETTINGS" \
  bash scripts/gpu_sdxl_drill.sh > /tmp/drill/drill.out 2>&1
{ echo "== drill"; cat /tmp/drill/report.txt; } | tee -a "$OUT/reports.txt"
tar czf "$OUT/drill.tgz" -C /tmp drill
rm -f "$RUN/telemetry.jsonl" "$RUN/summary.json"   # kept in drill.tgz: the next run's records start afresh
mkdir -p /tmp/again
# shellcheck disable=SC2086
timeout -k 10 170 python3 -m runner execute /tmp/plan.json --run-dir "$RUN" --steps 120 $SETTINGS \
  --inject-preemptions kill@108 > /tmp/again/log.txt 2>&1
echo "runner exit $?"
cp "$RUN/telemetry.jsonl" "$RUN/summary.json" "$RUN/plan.json" /tmp/again/
python3 scripts/report_run.py "$RUN" > /tmp/again/report.txt 2>&1
{ echo "== again"; cat /tmp/again/report.txt; } | tee -a "$OUT/reports.txt"
grep -h '"checkpoint_load"' /tmp/drill/telemetry.jsonl /tmp/again/telemetry.jsonl | tee -a "$OUT/reports.txt"
tar czf "$OUT/again.tgz" -C /tmp again
