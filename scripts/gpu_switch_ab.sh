#!/usr/bin/env bash
# On the GPU machine (device tool): the precompiled whole-model resume with a switch of the runner's on and off, one
# run after the other on one machine: AB_ENV names it (default COSTSIM_PRECOMPILE_PRELOAD; COSTSIM_INDUCTOR_BYTECODE,
# ...). Each run is the shipped plan as written (scripts/gpu_sdxl_as_written.sh) under the H100 profile's `graphs`
# configuration, precompiled, with a spot notice at NOTICE of STEPS; the compile cache (/tmp/inductor, the as-written
# script's) is shared, so only a machine's first run compiles (about 300 s). A run's folder is named by its place and
# setting (1-precompile-preload-0; this script was gpu_preload_ab.sh, whose folders were named 1-preload-0).
# ORDER (default "1 0"): the switch's setting of each run, in order; its folders are numbered within the call (a
# later call on the same machine starts again at 1, and returns only its own). BUDGET_S (default 560): a run is
# skipped when fewer than 240 s of it are left (a warm run takes about 220 s). Everything lands in $OUT/ab.tgz (one folder a
# run) and $OUT/bench-restart.txt (scripts/bench_restart.py over the runs, side by side).
set -uo pipefail
AB_ENV=${AB_ENV:-COSTSIM_PRECOMPILE_PRELOAD}; ORDER=${ORDER:-"1 0"}; BUDGET_S=${BUDGET_S:-560}; OUT=${OUT:-/tmp/out}
# 12 steps, the notice at 4: the resumed life's 8 are enough for `costsim calibrate` (6 after a start), which 8
# steps (4 after the resume) were not
export STEPS=${STEPS:-12} NOTICE=${NOTICE:-4} EXECUTE_TIMEOUT=${EXECUTE_TIMEOUT:-520}
export EXECUTE_ARGS="--runtime compile=model --runtime ddp_graph=whole --runtime compile_mode=reduce-overhead --runtime precompile=true --notice-save always"
[[ -d /tmp/inductor ]] && echo "compile cache warm" || echo "compile cache empty: this machine's first run compiles"
rm -rf /tmp/ab   # an earlier call's runs on this machine (returned by that call): its tarball held them again
i=0; runs=()
short=$(echo "${AB_ENV#COSTSIM_}" | tr 'A-Z_' 'a-z-')   # COSTSIM_PRECOMPILE_PRELOAD: precompile-preload
for setting in $ORDER; do
  i=$((i + 1)); name="$i-$short-$setting"
  if (( i > 1 && SECONDS > BUDGET_S - 240 )); then echo "skipped $name: ${SECONDS} s of ${BUDGET_S} gone"; continue; fi
  mkdir -p "/tmp/ab/$name"
  echo "$name"
  env "$AB_ENV=$setting" OUT="/tmp/ab/$name" RUN_DIR=/tmp/run bash scripts/gpu_sdxl_as_written.sh
  mkdir -p "/tmp/ab/$name/run" && tar xzf "/tmp/ab/$name/run.tgz" -C "/tmp/ab/$name/run" && rm "/tmp/ab/$name/run.tgz"
  runs+=("/tmp/ab/$name/run")
done
rm -rf /tmp/run   # its checkpoints: 30.8 GB of the 64 GB disk
source scripts/gpu_site.sh
PYTHONPATH=/tmp/site:$PWD python3 scripts/bench_restart.py "${runs[@]}" > "$OUT/bench-restart.txt" 2>&1
tar czf "$OUT/ab.tgz" -C /tmp/ab .
