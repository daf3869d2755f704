#!/usr/bin/env bash
# On the GPU machine (device tool): issue #36's same-node restart after two changes, side by side with
# what they replace: the checkpoint reader's own record parser (runner.checkpoint_reader._record; before:
# torch.load per tensor record, GIL-bound) and the worker's lean imports (diffusers without peft and
# transformers, runner.workloads.lean_imports).
#   1. load.txt: `scripts/bench_load.py` on the GPU, 8 GB in 1,700 tensors (SDXL's training state has
#      about 6,700 in 30.8 GB): DCP's reader, the runner's with records, the runner's with torch.load;
#   2. imports.txt: `import torch; from diffusers import UNet2DConditionModel` in fresh processes,
#      plain and lean, alternating, three each;
#   3. three lives of one run folder of the shipped plan as written (`costsim plan --workload sdxl --gpu
#      H200`), an async checkpoint every 8 steps (scripts/gpu_sdxl_warm_start.sh's): 1 fresh with an empty
#      compile cache, 2 and 3 resumed on the same node with the cache warm. report.txt (`runner report`),
#      starts.jsonl (each start's runtime, compile, start and checkpoint_load events), lives.txt, notes.txt.
# The run folder less its checkpoints (plan.json, summary.json, telemetry.jsonl: what `costsim calibrate`
# reads) in run-*. LIVES_ONLY=1 skips 1 and 2.
# Wheels in .whl/ (simpy, diffusers, importlib_metadata).
set -uo pipefail
OUT=${OUT:-/tmp/out}
source scripts/gpu_lives.sh
prepare_machine > "$OUT/setup.txt" 2>&1
[ -n "${LIVES_ONLY:-}" ] || python3 scripts/bench_load.py --gb 8 --tensors 1700 --device cuda --dir /tmp/bench-load --threads 8 --rounds 2 \
  > "$OUT/load.txt" 2>&1 || { echo "bench_load failed: the lives would fail the same way" >> "$OUT/load.txt"; exit 1; }
for round in $([ -n "${LIVES_ONLY:-}" ] || echo 1 2 3); do
  for mode in plain lean; do
    python3 - "$mode" >> "$OUT/imports.txt" 2>&1 <<'PY'
import sys, time
started = time.perf_counter()
import torch
from runner.workloads import lean_imports, resolve
builder = resolve("sdxl-unet") if sys.argv[1] == "lean" else None
with lean_imports(builder) if builder else __import__("contextlib").nullcontext():
    from diffusers import UNet2DConditionModel
print(f"{sys.argv[1]:<6} torch + diffusers {time.perf_counter() - started:6.2f} s  peft {'peft' in sys.modules}  "
      f"transformers {'transformers' in sys.modules}")
PY
  done
done
python3 -m costsim plan --workload sdxl --gpu H200 --out /tmp/plan.json >> "$OUT/setup.txt" 2>&1
every_8 /tmp/plan.json
life 12 life1-cold "$OUT/lives.txt"
life 20 life2-warm "$OUT/lives.txt"
life 28 life3-warm "$OUT/lives.txt"
python3 -m runner report "$RUN_DIR" > "$OUT/report.txt" 2>&1
grep -E '"event":"(compile|runtime|checkpoint_load|start)"' "$RUN_DIR/telemetry.jsonl" > "$OUT/starts.jsonl"
for name in plan.json summary.json telemetry.jsonl; do cp "$RUN_DIR/$name" "$OUT/run-$name"; done
