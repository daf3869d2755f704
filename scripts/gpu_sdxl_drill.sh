#!/usr/bin/env bash
# On the GPU machine (device tool, nvidia-h200-x2): the sdxl-unet workload through the runner.
#  1. (PROFILE=1) `runner profile` on 1 and 2 H200s at BATCH per GPU -> $OUT/profile-h200.yaml
#  2. the drill: `runner execute` on 2 H200s for STEPS steps, async checkpoints every INTERVAL steps,
#     one injected SIGKILL at KILL (0: none), resume, final synchronous save; then the run report.
# RUNTIME: runner settings (e.g. "--runtime compile=blocks"); default: the fastest configuration of
# an earlier scripts/gpu_sdxl_bench.sh on this machine (/tmp/bench_sdxl.jsonl), else eager. A
# compile cache left by that bench is copied in, as a restart on shared storage would find it.
# Wheels for simpy/diffusers/importlib_metadata come in .whl/.
set -uo pipefail
STEPS=${STEPS:-140}; INTERVAL=${INTERVAL:-40}; KILL=${KILL:-90}; BATCH=${BATCH:-8}; LIMIT=${LIMIT:-330}
PROFILE=${PROFILE:-1}; OUT=${OUT:-/tmp/out}; RUN=${RUN:-/tmp/sdxl-run}
export PYTHONUNBUFFERED=1
source scripts/gpu_site.sh
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [[ -z "${RUNTIME+x}" ]]; then
  RUNTIME=$([[ -f /tmp/bench_sdxl.jsonl ]] && python3 scripts/bench_sdxl.py best /tmp/bench_sdxl.jsonl --batch "$BATCH")
fi
CACHE=""
case "$RUNTIME" in
  *compile=blocks*channels_last=true*) CACHE=/tmp/inductor-blocks-cl ;;
  *compile=blocks*) CACHE=/tmp/inductor-blocks ;;
  *compile=model*) CACHE=/tmp/inductor-model ;;
esac
[[ -n "$CACHE" && ! -d "$CACHE" ]] && CACHE=""
echo "runtime: ${RUNTIME:-eager defaults}; compile cache seed: ${CACHE:-none}" | tee "$OUT/config.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/config.txt"
df -h /tmp | tail -1 | tee -a "$OUT/config.txt"

if [[ "$PROFILE" == 1 ]]; then
  date +%T
  # shellcheck disable=SC2086
  TORCHINDUCTOR_CACHE_DIR=${CACHE:-/tmp/inductor-profile} timeout -k 10 180 python3 -m runner profile --workload sdxl \
    --gpu H200 --gpus 1,2 --batch "$BATCH" --steps 20 $RUNTIME --out "$OUT/profile-h200.yaml" --run-root /tmp/prof \
    > "$OUT/profile.log" 2>&1
  echo "profile exit $?"
  tar czf "$OUT/profile-runs.tgz" -C /tmp/prof --exclude checkpoints --exclude compile-cache . 2>/dev/null
fi

# Whatever happens, bring back the telemetry and the report.
trap 'cp "$RUN/telemetry.jsonl" "$RUN/summary.json" "$RUN/plan.json" "$OUT/" 2>/dev/null; python3 -m runner report "$RUN" > "$OUT/report.txt" 2>&1' EXIT
date +%T; python3 -m costsim plan --workload sdxl --gpu H200 --trials 20 --jobs 4 --out /tmp/plan.json --format json > /dev/null
python3 - "$BATCH" "$INTERVAL" <<'PY'
import json, sys
plan = json.load(open("/tmp/plan.json"))
plan["resources"].update(gpus_per_node=2, nodes=1)
plan["workload"]["global_batch"] = 2 * int(sys.argv[1])
plan["prediction"].update(per_gpu_batch=int(sys.argv[1]), accumulation=1)   # BATCH per GPU, no accumulation
plan["checkpoint"].update(interval_steps=int(sys.argv[2]), keep=2, **{"async": True})
json.dump(plan, open("/tmp/plan.json", "w"), indent=1)
PY
rm -rf "$RUN"; mkdir -p "$RUN"
[[ -n "$CACHE" ]] && cp -r "$CACHE" "$RUN/compile-cache"
INJECT=(); [[ "$KILL" != 0 ]] && INJECT=(--inject-preemptions "kill@$KILL")
# At LIMIT the workers get SIGTERM, the spot notice: they write an emergency checkpoint (~36 s for
# SDXL) before they exit. SIGKILL comes 60 s later, so none is left holding the GPUs after this script.
# shellcheck disable=SC2086
timeout -k 60 "$LIMIT" python3 -m runner execute /tmp/plan.json --run-dir "$RUN" --steps "$STEPS" $RUNTIME \
  "${INJECT[@]}" > "$OUT/log.txt" 2>&1
echo "runner exit $?"; date +%T
python3 -m runner report "$RUN" --format json > "$OUT/report.json"
