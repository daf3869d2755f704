#!/usr/bin/env bash
# On the GPU machine (device tool, nvidia-h200-x2): 2-GPU scaling efficiency of the sdxl-unet workload
# at its best configuration, and what moves it. Every run is `runner profile` (torchrun, DDP,
# telemetry, no periodic checkpoints) of STEPS steps at BATCH per GPU, under compile=blocks with one
# shared compile cache (only the first run compiles cold).
# SET=main (2026-11-29, first call):
#   base        1 and 2 GPUs: the efficiency (2-GPU samples/s over twice the 1-GPU samples/s)
#   steady      1 and 2 GPUs with gc_every=50 expandable_segments=true (periodic stalls out?)
#   bucket100   2 GPUs, 100 MB DDP buckets;  bf16comm   2 GPUs, gradients all-reduced in bf16
#   then bench_sdxl.py's bare and runner loops at batch 1 on one GPU
# SET=tune (second call): what the first showed to help, together
#   tuned       1 and 2 GPUs, gc_every=50 ddp_bucket_mb=200;  tuned400   2 GPUs, 400 MB buckets
#   then bench rows on both GPUs side by side: batch 1 (bare, runner, runner gc_every=50) on GPU 0,
#   batch 8 (bare, runner eager, runner compile=blocks gc_every=50) on GPU 1
# SET=model (fourth call): whole-model compilation, the fastest single-GPU row of the bench at 8 per
#   GPU, at 16 per GPU (BATCH=16): 2 GPUs first (both ranks compile cold), then 1 GPU (cache warm)
# SET=b16 (fifth): compile=blocks at 16 per GPU (BATCH=16), 1 and 2 GPUs; 2 GPUs with 400 MB buckets
# SET=whole (next): SET=model with ddp_graph=whole, 1 GPU first (cold), then 2 GPUs: does the 2-GPU
#   start find the 1-GPU graph in the cache (18.8 s first step instead of 83.8 s), and what does
#   giving up the all-reduce's overlap cost the efficiency (0.939 split)?
#   (2026-11-30: the 1-GPU run compiled cold in 267 s; the 2-GPU run found nothing usable and was
#   still compiling after 230 s: the budget ended it)
# SET=whole2: 2 GPUs only, ddp_graph=whole (cold), for its efficiency; a drill after it on the same
#   machine finds its cache (copy /tmp/inductor-blocks to /tmp/inductor-model)
# Results (the device tool brings back few files): $OUT/ddp.txt (the comparison table and the bench
# table), $OUT/bench_sdxl.jsonl, $OUT/detail.tgz (each run's runner report JSON, calibrated profile, log,
# telemetry). Wheels come in .whl/.
# Try it on CPU first: GPU=cpu CONFIG=tests/data/tiny_unet_config.json BATCH=2 STEPS=10 bash scripts/gpu_sdxl_ddp.sh
set -uo pipefail
SET=${SET:-main}; OUT=${OUT:-/tmp/out}; BATCH=${BATCH:-8}; STEPS=${STEPS:-40}; BUDGET=${BUDGET:-560}; GPU=${GPU:-H200}; CONFIG=${CONFIG:-}
export PYTHONUNBUFFERED=1
[[ -d .whl ]] && source scripts/gpu_site.sh
D=/tmp/ddp-detail; rm -rf "$D"; mkdir -p "$OUT" "$D"
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-blocks
START=$(date +%s); rm -rf /tmp/ddp

profile() {   # profile NAME GPUS [--runtime K=V ...]
  local name=$1 gpus=$2; shift 2
  local left=$(( START + BUDGET - $(date +%s) ))
  if (( left < 60 )); then echo "skip $name (out of time)"; return; fi
  echo "[$(( $(date +%s) - START ))s] $name: gpus $gpus $*"
  timeout -k 10 "$left" python3 -m runner profile --workload sdxl --gpu "$GPU" --gpus "$gpus" --batch "$BATCH" \
    --steps "$STEPS" --runtime compile=blocks ${CONFIG:+--option config="$CONFIG"} "$@" --out "$D/$name.yaml" \
    --run-root "/tmp/ddp/$name" \
    > "$D/$name.log" 2>&1 || echo "$name: exit $?"
  for run in /tmp/ddp/"$name"/gpus*; do
    [[ -d "$run" ]] && python3 -m runner report "$run" --format json > "$D/$name-$(basename "$run").json"
  done
}

bench() {   # bench GPU ARGS...: one bench_sdxl.py row
  local gpu=$1; shift
  CUDA_VISIBLE_DEVICES=$gpu timeout -k 10 150 python3 scripts/bench_sdxl.py "$@" --steps 30 ${CONFIG:+--config "$CONFIG"} \
    --results "$OUT/bench_sdxl.jsonl" >> "$D/bench_gpu$gpu.log" 2>&1 || echo "bench $*: exit $?"
}

if [[ "$SET" == main ]]; then
  profile base 1,2
  profile steady 1,2 --runtime gc_every=50 --runtime expandable_segments=true
  profile bucket100 2 --runtime ddp_bucket_mb=100
  profile bf16comm 2 --runtime ddp_comm=bf16
  bench 0 bare --batch 1; bench 0 runner --batch 1
elif [[ "$SET" == model ]]; then
  profile model16 2,1 --runtime compile=model --runtime gc_every=50 --runtime expandable_segments=true \
    --runtime ddp_bucket_mb=200
elif [[ "$SET" == whole ]]; then
  profile whole16 1,2 --runtime compile=model --runtime ddp_graph=whole --runtime gc_every=50 \
    --runtime expandable_segments=true --runtime ddp_bucket_mb=200
elif [[ "$SET" == whole2 ]]; then
  profile whole16 2 --runtime compile=model --runtime ddp_graph=whole --runtime gc_every=50 \
    --runtime expandable_segments=true --runtime ddp_bucket_mb=200
elif [[ "$SET" == b16 ]]; then
  profile blocks16 1,2 --runtime gc_every=50 --runtime expandable_segments=true --runtime ddp_bucket_mb=200
  profile blocks16-400 2 --runtime gc_every=50 --runtime expandable_segments=true --runtime ddp_bucket_mb=400
else
  profile tuned 1,2 --runtime gc_every=50 --runtime ddp_bucket_mb=200
  profile tuned400 2 --runtime gc_every=50 --runtime ddp_bucket_mb=400
  (bench 0 bare --batch 1; bench 0 runner --batch 1; bench 0 runner --batch 1 --runtime gc_every=50) &
  (bench 1 bare --batch 8; bench 1 runner --batch 8
   bench 1 runner --batch 8 --runtime compile=blocks --runtime gc_every=50) &
  wait
fi
python3 - "$D" <<'PY' | tee "$OUT/ddp.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*-gpus*.json"))}
one = {k.split("-gpus")[0]: r for k, r in rows.items() if r["world_size"] == 1}
print(f"{'run':<28}{'mean s':>8}{'median s':>10}{'slow':>6}{'per GPU/s':>11}{'eff mean':>10}{'eff median':>12}  end of run")
for name, r in rows.items():
    if not r["step_time_s"]:
        print(f"{name:<28}  no steady steps (see its log)")
        continue
    base = one.get(name.split("-gpus")[0]) or next(iter(one.values()), None)   # tuned400: tuned's 1 GPU
    eff = (base["step_time_s"] / r["step_time_s"], base["step_time_median_s"] / r["step_time_median_s"]) \
        if base and base["step_time_s"] and r["world_size"] == 2 else ("", "")
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else v
    print(f"{name:<28}{r['step_time_s']:>8.3f}{r['step_time_median_s']:>10.3f}{r['slow_steps']:>6}"
          f"{r['samples_per_s_per_gpu']:>11.2f}{fmt(eff[0]):>10}{fmt(eff[1]):>12}  {r.get('end_of_run')}")
PY
[[ -f "$OUT/bench_sdxl.jsonl" ]] && python3 scripts/bench_sdxl.py report "$OUT/bench_sdxl.jsonl" | tee -a "$OUT/ddp.txt"
tar czf "$OUT/detail.tgz" --exclude checkpoints --exclude compile-cache -C / "${D#/}" tmp/ddp
