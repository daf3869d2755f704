#!/usr/bin/env bash
# On the GPU machine (device tool): issue #36's same-node restart and notice exit after three changes,
# two of them beside what they replace in one run, then the lives of the plan as written:
#   1. bench.txt: the machine; `scripts/bench_build.py` with a weights folder (the full SDXL UNet saved
#      here): a fresh start's build reads it, a resume's builds the model empty for the checkpoint;
#      `scripts/bench_exit.py`: a process's exit holding 70 GB on the GPU and 30.8 GB of host staging
#      memory, 4 KB pages as before against the huge-page arena the staging buffers are now;
#   2. three lives of one run folder of the shipped plan as written (`costsim plan --workload sdxl --gpu
#      H200`), an async checkpoint every 8 steps (scripts/gpu_lives.sh): 1 fresh with an empty compile
#      cache, 2 and 3 resumed on the same node (the model built empty, scipy hidden from diffusers'
#      import); a notice after steps 12, 20 and 28, each timed to the exit (notes.txt). report.txt
#      (`runner report`), lives.txt, and the run folder less its checkpoints in run-*.
# LIVES_ONLY=1 skips the benchmarks. Wheels in .whl/ (simpy, diffusers, importlib_metadata). Needs an H200: the plan's micro-batch of 8
# does not fit an H100's 80 GB.
set -uo pipefail
OUT=${OUT:-/tmp/out}
source scripts/gpu_lives.sh
prepare_machine > "$OUT/bench.txt" 2>&1
{ if [ -z "${LIVES_ONLY:-}" ]; then
    python3 -c 'import torch; from diffusers import UNet2DConditionModel; from runner.workloads.sdxl import load_config
with torch.device("cuda"): unet = UNet2DConditionModel.from_config(load_config(None))
unet.save_pretrained("/tmp/unet-weights")'
    echo "== python3 scripts/bench_build.py --option weights=/tmp/unet-weights --rounds 2"
    python3 scripts/bench_build.py --option weights=/tmp/unet-weights --rounds 2; rm -rf /tmp/unet-weights
    echo "== python3 scripts/bench_exit.py --host-gb 30.8 --device-gb 70 --rounds 2 --variants bare,gpu,gpu+host,gpu+host-huge"
    python3 scripts/bench_exit.py --host-gb 30.8 --device-gb 70 --rounds 2 --variants bare,gpu,gpu+host,gpu+host-huge
  fi
  python3 -m costsim plan --workload sdxl --gpu H200 --out /tmp/plan.json; } >> "$OUT/bench.txt" 2>&1
every_8 /tmp/plan.json
for at in 12 20 28; do   # the telemetry after each life: a call cut short keeps what it measured
  life $at "life-to-$at" "$OUT/lives.txt"; cp "$RUN_DIR/telemetry.jsonl" "$OUT/run-telemetry.jsonl"
done
python3 -m runner report "$RUN_DIR" > "$OUT/report.txt" 2>&1
for name in plan.json summary.json telemetry.jsonl; do cp "$RUN_DIR/$name" "$OUT/run-$name"; done
