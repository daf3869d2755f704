#!/usr/bin/env bash
# On the GPU machine (device tool, nvidia-h200-x2): the restart of the fastest configuration
# (compile=model ddp_graph=whole, 16 per GPU), in two calls on one machine (the second must follow the
# first while the machine is warm: it needs the first's compile cache in /tmp).
# Measured so on 2026-11-30: data/measurements/2026-11-30-h200-sdxl-reader/README.md (with two more
# restarts of the drill's run folder on the same machine, the commands there).
#   PART=1  the checkpoint reader against DCP's on one GPU (scripts/bench_load.py, 8 GB: about half a
#           rank's share of the SDXL state on 2 GPUs), then `runner profile` on 2 GPUs with an empty compile cache
#           (its efficiency, and the cache the drill starts from)                        ~450 s
#   PART=2  the drill: async checkpoints every 30 steps (a write takes 22-30 s: 28-37 steps), a
#           SIGKILL at step 75, after the step-30 checkpoint is complete and while step 60's is
#           written: the restart loads step 30                                            ~330 s
# Results in $OUT: load.txt, ddp.txt (PART=1); report.txt, telemetry.jsonl, log.txt, ... (PART=2).
# Wheels for simpy/diffusers/importlib_metadata come in .whl/ (carry [".whl"]).
set -uo pipefail
PART=${PART:-1}; OUT=${OUT:-/tmp/out}
SETTINGS="--runtime compile=model --runtime ddp_graph=whole --runtime gc_every=50 --runtime expandable_segments=true --runtime ddp_bucket_mb=200"
mkdir -p "$OUT"
if [[ "$PART" == 1 ]]; then
  source scripts/gpu_site.sh
  CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/site:$PWD timeout -k 10 120 python3 scripts/bench_load.py --gb 8 \
    --device cuda --threads 1,8 --rounds 2 --dir /tmp/bench-load 2>&1 | tee "$OUT/load.txt"
  SET=whole2 OUT=$OUT BATCH=16 STEPS=30 BUDGET=440 bash scripts/gpu_sdxl_ddp.sh
else
  rm -rf /tmp/inductor-model && cp -r /tmp/inductor-blocks /tmp/inductor-model   # gpu_sdxl_ddp.sh's cache
  OUT=$OUT PROFILE=0 BATCH=16 STEPS=110 INTERVAL=30 KILL=75 LIMIT=540 RUNTIME="$SETTINGS" \
    bash scripts/gpu_sdxl_drill.sh > "$OUT/drill.out" 2>&1
  tail -3 "$OUT/drill.out"; cat "$OUT/report.txt"
fi
