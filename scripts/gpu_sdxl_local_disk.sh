#!/usr/bin/env bash
# On the GPU machine (device tool): the shipped SDXL plan as written, checkpoints on the node's own
# 64 GiB disk (the default folder): `runner execute plan.json --steps STEPS --inject-preemptions
# term@NOTICE` (the notice's emergency save, the restart from it, the final save, the export), then
# `runner report`. The case that filled this disk at the export before the disk checks (#27).
# Everything lands in $OUT. Wheels as scripts/gpu_sdxl_storage.sh says.
set -uo pipefail
STEPS=${STEPS:-12}; NOTICE=${NOTICE:-6}; OUT=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
source scripts/gpu_site.sh
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
python3 -m costsim plan --workload sdxl --gpu H200 --jobs 4 --out /tmp/plan.json > /dev/null 2>&1
df -h /tmp | tail -1 > "$OUT/notes.txt"
(while sleep 5; do df --output=avail -B1 /tmp | tail -1; done > "$OUT/free-bytes.txt") &
timeout -k 20 480 python3 -m runner execute /tmp/plan.json --run-dir /tmp/run --steps "$STEPS" \
  --inject-preemptions "term@$NOTICE" > /tmp/execute.log 2>&1
echo "execute exit $?" >> "$OUT/notes.txt"; df -h /tmp | tail -1 >> "$OUT/notes.txt"
tail -c 200000 /tmp/execute.log > "$OUT/execute.txt"   # the workers' errors too
grep -v '"event":"step"' /tmp/run/telemetry.jsonl > "$OUT/telemetry.jsonl"
python3 -m runner report /tmp/run > "$OUT/report.txt" 2>&1
ls -la /tmp/run /tmp/run/checkpoints >> "$OUT/notes.txt" 2>&1
cat "$OUT/notes.txt"
