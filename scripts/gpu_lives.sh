# Sourced by the GPU scripts that drive the lives of one run folder (gpu_sdxl_warm_start.sh,
# gpu_sdxl_fast_resume.sh, gpu_sdxl_empty_build.sh): the machine made ready, the shipped plan with an async
# checkpoint every 8 steps, and a life that `runner execute`s it until rank 0 has reported a step, then
# sends the spot notice (SIGTERM).
# Uses OUT (lives.txt, notes.txt), RUN_DIR (default /tmp/run), PLAN (default /tmp/plan8.json), STEPS (60),
# EXECUTE_ARGS (more arguments for `runner execute`, split on spaces).
RUN_DIR=${RUN_DIR:-/tmp/run}
PLAN=${PLAN:-/tmp/plan8.json}
STEPS=${STEPS:-60}

prepare_machine() {   # the wheels from .whl/ (scripts/device_wheels.sh makes them here), the environment, a clean
  # run folder and compile cache (a warm machine keeps an earlier call's); prints what the machine is
  export PYTHONUNBUFFERED=1
  source scripts/gpu_site.sh
  export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
  export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-warm
  rm -rf "$RUN_DIR" "$TORCHINDUCTOR_CACHE_DIR"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; df -h /tmp; nproc; free -g | head -2
  git log -1 --format=%h 2>/dev/null; python3 -c 'import torch, diffusers; print(torch.__version__, diffusers.__version__)'
}

every_8() {   # $1 a plan.json: its copy at $PLAN with an async checkpoint every 8 steps; MICRO_BATCH caps its
  # micro-batch, the global batch kept by accumulation (unset: 4 on a card under 100 GB, an H100, whose 80 GB the
  # flagship's 8 outgrows; the plan's own elsewhere)
  local mib
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  if [[ -z ${MICRO_BATCH:-} ]] && (( mib < 100000 )); then MICRO_BATCH=4; fi
  echo "micro-batch: ${MICRO_BATCH:-as planned} (GPU memory $mib MiB)"
  python3 - "$1" "$PLAN" "${MICRO_BATCH:-}" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
doc["checkpoint"].update(interval_steps=8, **{"async": True})
if sys.argv[3]:
    doc["prediction"]["per_gpu_batch"] = int(sys.argv[3])
json.dump(doc, open(sys.argv[2], "w"), indent=1)
PY
}
reached() {   # whether rank 0 has reported step $1
  python3 -c "import json,sys; print(max((e.get('step', 0) for e in map(json.loads, open(sys.argv[2]))
    if e.get('event') in ('progress', 'step') and e.get('rank') == 0), default=0) >= int(sys.argv[1]))" \
    "$1" "$RUN_DIR/telemetry.jsonl" 2>/dev/null | grep -q True
}
life() {   # $1 notice step, $2 name, $3 where its stderr goes; the rest: environment for the life
  local at=$1 name=$2 err=$3; shift 3
  echo "== $name" >> "$OUT/lives.txt"
  # shellcheck disable=SC2086
  env "$@" python3 -m runner execute "$PLAN" --run-dir "$RUN_DIR" --steps "$STEPS" ${EXECUTE_ARGS:-} \
    >> "$OUT/lives.txt" 2>>"$err" &
  local pid=$! started noticed="" code; started=$(date +%s.%N)
  for _ in $(seq 3000); do
    reached "$at" && { kill -TERM $pid; noticed=$(date +%s.%N); break; }
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  wait $pid; code=$?
  echo "$name: exit $code after $(python3 -c "import time; print(round(time.time() - $started, 1))") s" \
    "${noticed:+(notice to exit $(python3 -c "import time; print(round(time.time() - $noticed, 1))") s)}" \
    | tee -a "$OUT/notes.txt"
}
