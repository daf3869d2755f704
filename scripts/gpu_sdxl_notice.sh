#!/usr/bin/env bash
# On the GPU machine (device tool): the shipped SDXL plan as written on a 1-GPU node with a 64 GiB disk,
# and the spot notice's emergency save of the 30.8 GB checkpoint to the node's disk and through an
# S3-compatible store, side by side in one call:
#   1. `runner execute plan.json` with the default checkpoint folder on the node disk: the disk check
#      at the start (two checkpoints and the export must fit at once);
#   2. `runner execute plan.json --checkpoint-dir DIR` on the node disk, SIGTERM to `runner execute`
#      once step NOTICE is done: the emergency save, the exit;
#   3. the same with `--checkpoint-dir s3://ckpt/notice` (SeaweedFS `weed mini` on loopback, data in
#      /dev/shm): the emergency save, its upload, the exit.
# Everything lands in $OUT. Wheels as scripts/gpu_sdxl_storage.sh says.
set -uo pipefail
NOTICE=${NOTICE:-3}; OUT=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
source scripts/gpu_site.sh
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
export AWS_ACCESS_KEY_ID=costsim AWS_SECRET_ACCESS_KEY=costsim-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:8333
WEED=$(command -v weed || find /tmp/site -name weed -type f | head -1)
chmod +x "$WEED"
mkdir -p /dev/shm/weed
(cd /dev/shm/weed && exec "$WEED" mini -dir=/dev/shm/weed/data -ip=127.0.0.1 -ip.bind=127.0.0.1 -bucket=ckpt \
  -master.telemetry=false > /tmp/weed.log 2>&1) &
trap 'pkill -f "weed mini" 2>/dev/null' EXIT
python3 -m costsim plan --workload sdxl --gpu H200 --jobs 4 --out /tmp/plan.json > /dev/null 2>&1
df -h /tmp | tail -1 > "$OUT/notes.txt"
echo "== 1. as written, default checkpoint folder" >> "$OUT/notes.txt"
timeout -k 10 90 python3 -m runner execute /tmp/plan.json --run-dir /tmp/run0 --steps 30 > "$OUT/as-written.txt" 2>&1
echo "exit $?" >> "$OUT/notes.txt"
notice() {   # $1 run dir, $2 checkpoint dir: SIGTERM to runner execute once step NOTICE is done
  python3 -m runner execute /tmp/plan.json --run-dir "$1" --steps 30 --checkpoint-dir "$2" > "$1.log" 2>&1 &
  local pid=$! sent=""
  for _ in $(seq 400); do
    if [ -z "$sent" ] && grep -q "\"event\":\"step\",\"step\":$NOTICE," "$1/telemetry.jsonl" 2>/dev/null; then
      date +%s.%N > "$1.sent"; kill -TERM $pid; sent=1
    fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.5
  done
  wait $pid; echo "exit $? (notice sent at $(cat "$1.sent" 2>/dev/null), exited at $(date +%s.%N))" >> "$OUT/notes.txt"
  local name; name=$(basename "$1")
  grep -v '"event":"step"' "$1/telemetry.jsonl" > "$OUT/$name-telemetry.jsonl"; grep -v "^\[rank" "$1.log" > "$OUT/$name.txt"
}
echo "== 2. notice, node disk" >> "$OUT/notes.txt"; notice /tmp/runL /tmp/ckptL
echo "== 3. notice, store" >> "$OUT/notes.txt"; notice /tmp/runS s3://ckpt/notice
cat "$OUT/notes.txt"
