#!/usr/bin/env bash
# On the GPU machine (device tool, nvidia-h200-x2): the SDXL fine-tune's data path and EMA memory.
#   PART=1: scripts/bench_sdxl_data.py, round 1 (synthetic, then data) at the fastest configuration (the
#     profile's H200 entry: compile=model ddp_graph=whole, 16 per GPU, 2 GPUs), empty compile cache first
#   PART=2 (same machine, warm cache): round 2 (data, then synthetic), then the data path with EMA at
#     EMA_BATCHES per GPU
#   PART=3: the fine-tune as a user runs it: the full UNet saved with save_pretrained (random weights:
#     nothing is downloaded), `runner execute` on the shipped plan with weights=, data=, ema= and a
#     validation slice for STEPS steps (eager), the final checkpoint and the RUN/final/unet export
# Everything lands in $OUT. Wheels (simpy, diffusers, accelerate, safetensors, psutil, importlib_metadata) in .whl/.
set -uo pipefail
PART=${PART:-1}; STEPS=${STEPS:-60}; EMA_BATCHES=${EMA_BATCHES:-16,8}; OUT=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor   # one compile cache for every run on this machine
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpus-$PART.txt"
python3 -c 'import torch, diffusers; print("torch", torch.__version__, "diffusers", diffusers.__version__)' >> "$OUT/gpus-$PART.txt"
date +%T
case "$PART" in
  1) python3 scripts/bench_sdxl_data.py --data /tmp/latents --make 2048 --rounds 1 --first-round 1 --steps "$STEPS" \
       --root /tmp/bench1 > "$OUT/bench-1.txt" 2> "$OUT/bench-1-stderr.txt"
     tar czf "$OUT/bench-1.tgz" -C /tmp/bench1 --exclude=checkpoints . ;;
  2) python3 scripts/bench_sdxl_data.py --data /tmp/latents --rounds 1 --first-round 2 --steps "$STEPS" \
       --ema-batches "$EMA_BATCHES" --root /tmp/bench2 > "$OUT/bench-2.txt" 2> "$OUT/bench-2-stderr.txt"
     tar czf "$OUT/bench-2.tgz" -C /tmp/bench2 --exclude=checkpoints . ;;
  3) python3 -c 'import torch, diffusers; from runner.workloads.sdxl import load_config
with torch.device("cuda"): m = diffusers.UNet2DConditionModel.from_config(load_config())
m.save_pretrained("/tmp/sdxl-unet")' 2> "$OUT/save-stderr.txt"
     [[ -d /tmp/latents ]] || python3 -c 'import sys; sys.path.insert(0, "scripts"); from bench_sdxl_data import make_dataset
from pathlib import Path; make_dataset(Path("/tmp/latents"), 512)'
     date +%T
     python3 -m costsim plan --workload sdxl --gpu H200 --trials 100 --jobs 4 --out /tmp/plan.json > "$OUT/plan.txt" 2>&1
     rm -rf /tmp/finetune
     timeout -k 60 420 python3 -m runner execute /tmp/plan.json --run-dir /tmp/finetune --steps "$STEPS" --runtime compile=off \
       --option weights=/tmp/sdxl-unet --option data=/tmp/latents --option ema=0.9999 --option val_samples=64 \
       --option val_every=10 --option lr=1e-5 --option warmup_steps=5 --option schedule=cosine > "$OUT/finetune.log" 2>&1
     echo "execute exit $?"
     python3 -c 'import diffusers, torch; from safetensors.torch import load_file; import glob
m = diffusers.UNet2DConditionModel.from_pretrained("/tmp/finetune/final/unet"); print("exported UNet loads:", sum(p.numel() for p in m.parameters()), "parameters")' >> "$OUT/finetune.log" 2>&1
     python3 -m runner report /tmp/finetune --plot "$OUT/finetune.png" > "$OUT/finetune-report.txt" 2>&1
     ls -la /tmp/finetune/final/unet >> "$OUT/finetune-report.txt"
     tar czf "$OUT/finetune.tgz" -C /tmp/finetune telemetry.jsonl summary.json plan.json ;;
esac
date +%T
