#!/usr/bin/env bash
# On the GPU machine (device tool, nvidia-h200-x2): 2-GPU scaling efficiency of the sdxl-unet workload
# at its best configuration, and what moves it. Every run is `runner profile` (torchrun, DDP,
# telemetry, no periodic checkpoints) of STEPS steps at BATCH per GPU, under compile=blocks with one
# shared compile cache (only the first run compiles cold):
#   base        1 and 2 GPUs: the efficiency (2-GPU samples/s over twice the 1-GPU samples/s)
#   steady      1 and 2 GPUs with gc_every=50 expandable_segments=true (periodic stalls out?)
#   bucket100   2 GPUs, 100 MB DDP buckets;  bf16comm   2 GPUs, gradients all-reduced in bf16
# then, on one GPU, bench_sdxl.py's bare and runner loops at batch 1 (the runner without DDP at world
# size 1). Results: $OUT/<name>.yaml (the calibrated profile), $OUT/<name>-<run>.json (report_run of
# each run), $OUT/ddp.txt (the comparison), $OUT/bench_sdxl.jsonl. Wheels come in .whl/.
# Try it on CPU first: GPU=cpu CONFIG=tests/data/tiny_unet_config.json BATCH=2 STEPS=10 bash scripts/gpu_sdxl_ddp.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; BATCH=${BATCH:-8}; STEPS=${STEPS:-40}; BUDGET=${BUDGET:-560}; GPU=${GPU:-H200}; CONFIG=${CONFIG:-}
export PYTHONUNBUFFERED=1
[[ -d .whl ]] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-blocks
START=$(date +%s); rm -rf /tmp/ddp

profile() {   # profile NAME GPUS [--runtime K=V ...]
  local name=$1 gpus=$2; shift 2
  local left=$(( START + BUDGET - $(date +%s) ))
  if (( left < 60 )); then echo "skip $name (out of time)"; return; fi
  echo "[$(( $(date +%s) - START ))s] $name: gpus $gpus $*"
  timeout -k 10 "$left" python3 -m runner profile --workload sdxl --gpu "$GPU" --gpus "$gpus" --batch "$BATCH" \
    --steps "$STEPS" --runtime compile=blocks ${CONFIG:+--option config="$CONFIG"} "$@" --out "$OUT/$name.yaml" \
    --run-root "/tmp/ddp/$name" \
    > "$OUT/$name.log" 2>&1 || echo "$name: exit $?"
  for run in /tmp/ddp/"$name"/gpus*; do
    [[ -d "$run" ]] && python3 scripts/report_run.py "$run" --json > "$OUT/$name-$(basename "$run").json"
  done
}

profile base 1,2
profile steady 1,2 --runtime gc_every=50 --runtime expandable_segments=true
profile bucket100 2 --runtime ddp_bucket_mb=100
profile bf16comm 2 --runtime ddp_comm=bf16
for part in "bare --batch 1" "runner --batch 1"; do
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES=0 timeout -k 10 120 python3 scripts/bench_sdxl.py $part --steps 30 ${CONFIG:+--config "$CONFIG"} \
    --results "$OUT/bench_sdxl.jsonl" >> "$OUT/bench_b1.log" 2>&1 || echo "bench $part: exit $?"
done
tar czf "$OUT/ddp-runs.tgz" -C /tmp/ddp --exclude checkpoints --exclude compile-cache . 2>/dev/null
python3 - "$OUT" <<'PY' | tee "$OUT/ddp.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*-gpus*.json"))}
one = {k.split("-gpus")[0]: r for k, r in rows.items() if r["world_size"] == 1}
print(f"{'run':<28}{'mean s':>8}{'median s':>10}{'slow':>6}{'per GPU/s':>11}{'eff mean':>10}{'eff median':>12}  end of run")
for name, r in rows.items():
    if not r["step_time_s"]:
        print(f"{name:<28}  no steady steps (see its log)")
        continue
    base = one.get(name.split("-gpus")[0]) or one.get("base")
    eff = (base["step_time_s"] / r["step_time_s"], base["step_time_median_s"] / r["step_time_median_s"]) \
        if base and r["world_size"] == 2 and r["step_time_s"] else ("", "")
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else v
    print(f"{name:<28}{r['step_time_s']:>8.3f}{r['step_time_median_s']:>10.3f}{r['slow_steps']:>6}"
          f"{r['samples_per_s_per_gpu']:>11.2f}{fmt(eff[0]):>10}{fmt(eff[1]):>12}  {r.get('end_of_run')}")
PY
python3 scripts/bench_sdxl.py report "$OUT/bench_sdxl.jsonl" | tee -a "$OUT/ddp.txt"
