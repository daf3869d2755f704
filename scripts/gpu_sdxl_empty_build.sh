#!/usr/bin/env bash
# On the GPU machine (device tool): issue #36's same-node restart and notice exit after two changes, each
# beside what it replaces in one run, then the lives of the plan as written:
#   1. bench.txt: the machine; `scripts/bench_build.py` (the full SDXL UNet built for a fresh start,
#      initialised, against a resume's, empty for the checkpoint); `scripts/bench_exit.py` (a process's exit
#      holding 100 GB on the GPU and 30.8 GB of host staging memory: 4 KB pages, as before, against the
#      huge-page arena the staging buffers are now);
#   2. three lives of one run folder of the shipped plan as written (`costsim plan --workload sdxl --gpu
#      H200`), an async checkpoint every 8 steps (scripts/gpu_lives.sh): 1 fresh with an empty compile
#      cache, 2 and 3 resumed on the same node; a notice after steps 12, 20 and 28. report.txt (`runner
#      report`), lives.txt, notes.txt, and the run folder less its checkpoints in run-*.
# Wheels in .whl/ (simpy, diffusers, importlib_metadata).
set -uo pipefail
OUT=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-warm
rm -rf /tmp/run "$TORCHINDUCTOR_CACHE_DIR"   # a warm machine keeps an earlier call's
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; df -h /tmp; nproc; free -g | head -2
  git log -1 --format=%h; python3 -c 'import torch, diffusers; print(torch.__version__, diffusers.__version__)'
  echo "== python3 scripts/bench_build.py --rounds 2"; python3 scripts/bench_build.py --rounds 2
  echo "== python3 scripts/bench_exit.py --host-gb 30.8 --device-gb 100 --rounds 2 --variants bare,gpu,gpu+host,gpu+host-huge"
  python3 scripts/bench_exit.py --host-gb 30.8 --device-gb 100 --rounds 2 --variants bare,gpu,gpu+host,gpu+host-huge
  python3 -m costsim plan --workload sdxl --gpu H200 --out /tmp/plan.json; } > "$OUT/bench.txt" 2>&1
source scripts/gpu_lives.sh
every_8 /tmp/plan.json
life 12 life1-cold "$OUT/lives.txt"
life 20 life2-warm "$OUT/lives.txt"
life 28 life3-warm "$OUT/lives.txt"
python3 -m runner report /tmp/run > "$OUT/report.txt" 2>&1
for name in plan.json summary.json telemetry.jsonl; do cp "/tmp/run/$name" "$OUT/run-$name"; done
