#!/usr/bin/env bash
# On the GPU machine (device tool): issue #36's phases in one run, for `scripts/bench_restart.py` (item 6).
# The shipped plan as written (`costsim plan --workload sdxl --gpu H200`) with an async checkpoint every 8
# steps (scripts/gpu_lives.sh), four lives:
#   A  fresh, on the node's disk; the notice as rank 0 reports step 8, the step whose async write then starts:
#      notice to exit with that write in flight (the rule: keep it, no second save);
#   B  the same run folder on the same node: resumed from step 8, `--notice-save always`, the notice after
#      step 12: the same-node restart and notice to exit with a save and nothing in flight;
#   C  the plan as written (no async write under way at the notice), another run folder with an s3:// store (SeaweedFS on 127.0.0.1, its data in /dev/shm) and
#      `--share-compile-cache`, fresh, `--notice-save always`, the notice after step 10 (written and uploaded);
#   D  that run folder removed (a new node's disk), the page cache dropped: fetched from the store into
#      memory, the compile cache fetched, the notice 4 steps on (the rule keeps).
# Python's bytecode stays outside the run folders (PYTHONPYCACHEPREFIX=/tmp/pycache-image), as a node image's.
# OUT gets notes.txt (each life's notice to exit, from outside), lives.txt (their output), bench.txt
# (`scripts/bench_restart.py` over the two run folders), lives.tgz (both run folders' telemetry, the plans).
# LIVES=AB: A and B only. Wheels as scripts/gpu_sdxl_new_node.sh says. Needs an H200.
set -uo pipefail
OUT=${OUT:-/tmp/out}
source scripts/gpu_lives.sh
prepare_machine > "$OUT/notes.txt" 2>&1
tar xzf .whl/botocore-s3.tgz -C /tmp/site
export PATH=/tmp/site/bin:$PATH PYTHONPYCACHEPREFIX=/tmp/pycache-image
unset TORCHINDUCTOR_CACHE_DIR PYTHONDONTWRITEBYTECODE   # each run folder's own compile cache; the image's bytecode
export AWS_ACCESS_KEY_ID=costsim AWS_SECRET_ACCESS_KEY=costsim-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:8333
WEED=$(command -v weed || find /tmp/site -name weed -type f | head -1)
chmod +x "$WEED"; rm -rf /dev/shm/weed /dev/shm/costsim-* /tmp/run-local /tmp/run-store; mkdir -p /dev/shm/weed
(cd /dev/shm/weed && exec "$WEED" mini -dir=/dev/shm/weed/data -ip=127.0.0.1 -ip.bind=127.0.0.1 -bucket=ckpt \
  -master.telemetry=false > /tmp/weed.log 2>&1) &
trap 'pkill -f "weed mini" 2>/dev/null' EXIT
python3 -m costsim plan --workload sdxl --gpu H200 --out /tmp/plan.json > /tmp/plan.txt 2>&1
every_8 /tmp/plan.json
STEPS=60
RUN_DIR=/tmp/run-local
life 8 "A-fresh-write-in-flight" "$OUT/lives.txt"
EXECUTE_ARGS="--notice-save always" life 12 "B-same-node-save" "$OUT/lives.txt"
if [[ ${LIVES:-ABCD} == AB ]]; then   # the notice's two cases only
  python3 scripts/bench_restart.py /tmp/run-local > "$OUT/bench.txt" 2>&1
  tar czf "$OUT/lives.tgz" -C /tmp plan.txt plan8.json run-local/telemetry.jsonl run-local/summary.json
  exit 0
fi
rm -rf /tmp/run-local/checkpoints   # room on the 64 GiB disk for the store's lives
RUN_DIR=/tmp/run-store PLAN=/tmp/plan.json   # the plan as written: no async write under way at C's notice
EXECUTE_ARGS="--checkpoint-dir s3://ckpt/sdxl --share-compile-cache --notice-save always" life 10 "C-fresh-store" "$OUT/lives.txt"
cp /tmp/run-store/telemetry.jsonl /tmp/telemetry-C.jsonl
rm -rf /tmp/run-store; sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo "page cache dropped" >> "$OUT/notes.txt"
EXECUTE_ARGS="--checkpoint-dir s3://ckpt/sdxl --share-compile-cache" life 15 "D-new-node" "$OUT/lives.txt"
python3 scripts/bench_restart.py /tmp/run-local /tmp/telemetry-C.jsonl /tmp/run-store > "$OUT/bench.txt" 2>&1
tar czf "$OUT/lives.tgz" -C /tmp plan.txt plan8.json telemetry-C.jsonl run-local/telemetry.jsonl \
  run-local/summary.json run-store/telemetry.jsonl run-store/summary.json
