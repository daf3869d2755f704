#!/usr/bin/env bash
# On the GPU machine (device tool): what a start still compiles with a warm compile cache (issue #36's
# "the first step after a resume compiles nothing"). Three lives of one run folder, the shipped plan as
# written (`costsim plan --workload sdxl --gpu H200`), an async checkpoint every 8 steps:
#   1. a fresh start, empty compile cache, SIGTERM once step 12 is done (the step-8 checkpoint kept);
#   2. resumed on the same node (the cache of life 1 warm), SIGTERM once step 20 is done;
#   3. the same again under TORCH_LOGS=recompiles,graph_breaks (what Dynamo says it recompiles), to step 28.
# Each start's `compile` event (runner.speed.compile_report: Dynamo's frames and graphs, the FX-graph and
# AOTAutograd cache hits and misses, the slowest phases) and `runtime` event (the start's phases) in
# starts.jsonl; `runner report` (restart phases, compile lines) in report.txt; the lives' output in
# lives.txt (life 3's stderr, the torch logs, in torch-logs.txt); the machine and the plan in setup.txt.
# Wheels in .whl/ (simpy, diffusers, importlib_metadata).
set -uo pipefail
OUT=${OUT:-/tmp/out}
source scripts/gpu_lives.sh
prepare_machine > "$OUT/setup.txt" 2>&1
python3 -m costsim plan --workload sdxl --gpu H200 --out /tmp/plan.json >> "$OUT/setup.txt" 2>&1
every_8 /tmp/plan.json
life 12 life1-cold "$OUT/lives.txt"
life 20 life2-warm "$OUT/lives.txt"
life 28 life3-logged "$OUT/torch-logs.txt" TORCH_LOGS=recompiles,graph_breaks
python3 -m runner report "$RUN_DIR" > "$OUT/report.txt" 2>&1
grep -E '"event":"(compile|runtime|checkpoint_load|start)"' "$RUN_DIR/telemetry.jsonl" > "$OUT/starts.jsonl"
du -sh "$TORCHINDUCTOR_CACHE_DIR" >> "$OUT/notes.txt"
