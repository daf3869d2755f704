#!/usr/bin/env bash
# On the GPU machine (device tool, nvidia-h200-x2): restarts of the fastest configuration
# (compile=model ddp_graph=whole, 16 per GPU) with the checkpoint prefetch off and on, side by side on
# one machine. Two calls on one machine (the second needs the first's compile cache and run folder in /tmp).
#   PART=1  `runner profile` on 2 GPUs with an empty compile cache (its efficiency; its cache seeds the
#           run), then a 40-step `runner execute` that leaves a checkpoint (final synchronous save) ~450 s
#   PART=2  runs on that run folder, one per value in ORDER (default "false true" for
#           checkpoint_prefetch): each loads the newest checkpoint at its first start, is SIGKILLed 8
#           steps later, loads it again at the restart, runs to 20 steps past it and saves   ~190 s each
# Results in $OUT: ddp.txt, detail.tgz, first.tgz (PART=1); prefetch-<value>-<n>.tgz (telemetry, summary,
# plan, log, report) and reports.txt (PART=2). Wheels for simpy/diffusers/importlib_metadata come in
# .whl/ (carry [".whl"]).
set -uo pipefail
PART=${PART:-1}; OUT=${OUT:-/tmp/out}; RUN=/tmp/sdxl-run; ORDER=${ORDER:-false true}; LIMIT=${LIMIT:-270}
SETTINGS="--runtime compile=model --runtime ddp_graph=whole --runtime gc_every=50 --runtime expandable_segments=true --runtime ddp_bucket_mb=200"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

keep() {   # keep NAME: the run folder's records (no checkpoints, no cache) as $OUT/NAME.tgz, moved out of the run folder
  local dir=/tmp/keep/$1
  rm -rf "$dir"; mkdir -p "$dir"
  python3 scripts/report_run.py "$RUN" > "$dir/report.txt" 2>&1
  for f in telemetry.jsonl summary.json plan.json; do [[ -f "$RUN/$f" ]] && mv "$RUN/$f" "$dir/"; done
  [[ -f "$2" ]] && cp "$2" "$dir/log.txt"
  tar czf "$OUT/$1.tgz" -C /tmp/keep "$1"
}

if [[ "$PART" == 1 ]]; then
  SET=whole2 OUT=$OUT BATCH=16 STEPS=30 BUDGET=330 bash scripts/gpu_sdxl_ddp.sh   # installs the wheels too
  rm -rf /tmp/inductor-model && cp -r /tmp/inductor-blocks /tmp/inductor-model   # gpu_sdxl_ddp.sh's cache
  mkdir -p /tmp/first
  OUT=/tmp/first PROFILE=0 BATCH=16 STEPS=40 INTERVAL=30 KILL=0 LIMIT=200 RUNTIME="$SETTINGS" \
    bash scripts/gpu_sdxl_drill.sh > /tmp/first/drill.out 2>&1
  tail -3 /tmp/first/drill.out; cat /tmp/first/report.txt
  tar czf "$OUT/first.tgz" -C /tmp first
  rm -f "$RUN/telemetry.jsonl" "$RUN/summary.json"   # kept in first.tgz; PART=2's runs start records of their own
  ls "$RUN/checkpoints"
else
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  n=0
  for value in $ORDER; do
    n=$((n + 1))
    newest=$(find "$RUN/checkpoints" -maxdepth 1 -name 'step-*' -printf '%f\n' | sed 's/^step-//' | sort -n | tail -1)
    [[ -z "$newest" ]] && { echo "no checkpoint in $RUN/checkpoints: run PART=1 first"; exit 1; }
    echo "== checkpoint_prefetch=$value: steps $newest -> $((newest + 20)), SIGKILL at $((newest + 8)) ($(date +%T))"
    # shellcheck disable=SC2086
    timeout -k 10 "$LIMIT" python3 -m runner execute /tmp/plan.json --run-dir "$RUN" --steps $((newest + 20)) $SETTINGS \
      --runtime "checkpoint_prefetch=$value" --inject-preemptions "kill@$((newest + 8))" > /tmp/run.log 2>&1
    echo "runner exit $?"
    keep "prefetch-$value-$n" /tmp/run.log
    { echo "== prefetch-$value-$n"; cat "/tmp/keep/prefetch-$value-$n/report.txt"; } | tee -a "$OUT/reports.txt"
    grep -h '"checkpoint_load"' "/tmp/keep/prefetch-$value-$n/telemetry.jsonl" | tee -a "$OUT/reports.txt"
  done
fi
