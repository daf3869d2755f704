#!/usr/bin/env bash
# On the GPU machine (device tool, nvidia-h200-x2): the SDXL fine-tune's data path and EMA memory.
#   PART=1: scripts/bench_sdxl_data.py, rounds 1 and 2 (synthetic then data, data then synthetic) at the
#     fastest configuration (the profile's H200 entry: compile=model ddp_graph=whole, 16 per GPU, 2 GPUs),
#     STEPS steps each; the first run compiles into an empty cache, the others find it warm
#     (measured 2026-11-30: the first run's cold compile took 467 s, and the call's limit ended the
#     data run while it compiled: a compiled pair does not fit one call on a fresh machine)
#   PART=2: eager (compile=off), 8 per GPU (eager 16 per GPU runs out of memory on 2 GPUs): rounds 1
#     and 2, then the data path with EMA at EMA_BATCHES per GPU (none by default); then the fine-tune as a user runs it: the full UNet saved
#     with save_pretrained (random weights: nothing is downloaded), `runner execute` on the shipped plan
#     (8 x H200 at 8 per GPU; here 2 GPUs, accumulation 4) with weights=, data=, ema=0.9999, cosine LR and
#     a validation slice for FT_STEPS steps, eager; its final checkpoint and the RUN/final/unet export
#   PART=3: rounds 1 and 2 under the configuration the shipped plan chooses (the H200 `blocks` variant:
#     compile=blocks gc_every=50 ddp_bucket_mb=200, 8 per GPU), whose cold start is about a minute
# Everything lands in $OUT. Wheels (simpy, diffusers, accelerate, safetensors, psutil, importlib_metadata) in .whl/.
set -uo pipefail
PART=${PART:-1}; STEPS=${STEPS:-40}; FT_STEPS=${FT_STEPS:-20}; EMA_BATCHES=${EMA_BATCHES:-}; OUT=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
source scripts/gpu_site.sh
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor   # one compile cache for every run on this machine
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpus-$PART.txt"
python3 -c 'import torch, diffusers; print("torch", torch.__version__, "diffusers", diffusers.__version__)' >> "$OUT/gpus-$PART.txt"
date +%T
case "$PART" in
  1) # `runner profile` runs eager unless told: the H200 entry's settings, as its `runtime` names them
     FAST="--runtime compile=model --runtime ddp_graph=whole --runtime gc_every=50 --runtime expandable_segments=true --runtime ddp_bucket_mb=200"
     timeout -k 30 550 python3 scripts/bench_sdxl_data.py --data /tmp/latents --make 2048 --rounds 2 --steps "$STEPS" \
       $FAST --root /tmp/bench > "$OUT/bench-1.txt" 2> "$OUT/bench-1-stderr.txt"
     echo "bench exit $?"
     tar czf "$OUT/bench-1.tgz" -C /tmp/bench --exclude=checkpoints . ;;
  2) timeout -k 30 270 python3 scripts/bench_sdxl_data.py --data /tmp/latents --make 1024 --rounds 2 --batch 8 \
       --steps "$STEPS" --ema-batches "$EMA_BATCHES" --runtime compile=off --root /tmp/bench \
       > "$OUT/bench-2.txt" 2> "$OUT/bench-2-stderr.txt"
     echo "bench exit $?"; date +%T
     python3 -c 'import torch, diffusers; from runner.workloads.sdxl import load_config
with torch.device("cuda"): m = diffusers.UNet2DConditionModel.from_config(load_config())
m.save_pretrained("/tmp/sdxl-unet")' 2> /tmp/save-stderr.txt
     python3 -m costsim plan --workload sdxl --gpu H200 --trials 100 --jobs 4 --out /tmp/plan.json > /tmp/plan.txt 2>&1
     date +%T
     timeout -k 60 300 python3 -m runner execute /tmp/plan.json --run-dir /tmp/finetune --steps "$FT_STEPS" \
       --runtime compile=off --option weights=/tmp/sdxl-unet --option data=/tmp/latents --option ema=0.9999 \
       --option val_samples=64 --option val_every=10 --option lr=1e-5 --option warmup_steps=5 --option schedule=cosine \
       > "$OUT/finetune.log" 2>&1
     echo "execute exit $?"
     python3 -c 'import diffusers; m = diffusers.UNet2DConditionModel.from_pretrained("/tmp/finetune/final/unet")
print("exported UNet loads:", sum(p.numel() for p in m.parameters()), "parameters")' >> "$OUT/finetune.log" 2>&1
     python3 -m runner report /tmp/finetune --plot "$OUT/finetune.png" > "$OUT/finetune-report.txt" 2>&1
     ls -la /tmp/finetune/final/unet >> "$OUT/finetune-report.txt" 2>&1
     tar czf "$OUT/bench-2.tgz" -C /tmp/bench --exclude=checkpoints . -C /tmp/finetune telemetry.jsonl summary.json plan.json -C /tmp save-stderr.txt plan.txt ;;
  3) BLOCKS="--runtime compile=blocks --runtime gc_every=50 --runtime ddp_bucket_mb=200"
     timeout -k 20 360 python3 scripts/bench_sdxl_data.py --data /tmp/latents --make 1024 --rounds 2 --batch 8 \
       --steps "$STEPS" $BLOCKS --root /tmp/bench > "$OUT/bench-3.txt" 2> "$OUT/bench-3-stderr.txt"
     echo "bench exit $?"
     tar czf "$OUT/bench-3.tgz" -C /tmp/bench --exclude=checkpoints . ;;
esac
date +%T
