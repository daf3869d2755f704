#!/usr/bin/env bash
# On the GPU machine (device tool, nvidia-h200-x2): scripts/bench_sdxl.py over both GPUs at once.
# Lane 0 (GPU 0): matmul peak, bare vs runner loop at batch 1/4/8, eager options.
# Lane 1 (GPU 1): torch.compile variants, each cold (empty cache) then warm (a restart's case).
# SET=next: what the first sweeps left unmeasured (2026-11-29): whole-model compilation with a whole
# call's time, cuDNN benchmark mode, batch 12 (fits without activation checkpointing), CUDA graphs
# (reduce-overhead) and max-autotune for the blocks; all compiled rows with gc_every=50.
# SET=fp8: one GPU, fp8 blocks and the activation budget (below; FP8_ROWS=rest: the rows after the first call's).
# SET=accum: one GPU, the fastest configuration (compile=model at 16) at the flagship's global batch 64 (16 x 4
#   micro-batches: the optimizer steps once a step), then without accumulation from the warm cache.
# SET=cl: one GPU, the whole model compiled in channels_last (NHWC) at 16 (its GroupNorms then run in Inductor's
#   kernels, not eager's slow NHWC ones: channels_last was 0.92x eager and 0.905x with compile=blocks, 2026-11-29),
#   beside the plain loop at 12 as the machine's reference (compile=model at 16 was 1.308x it, 2026-11-29)
# SET=fp8large: one GPU, fp8 on the large linear layers only (fp8_select=large) at 16 x 4 (compile=blocks, or
#   FP8_COMPILE=model: not compiled within 450 s on 2026-12-03; FP8_BASELINE=1: bf16 first, which runs out of memory
#   under compile=blocks at 16 x 4), then the manifest CRC comparison (scripts/bench_checkpoint.py --notice 4: read
#   back after the write, or while writing, in the order A B B A).
# SET=sdpa: one GPU, cuDNN's attention against the default (flash) at 16 under compile=blocks, in the order A B A B
#   (each row its own process, the compile cache shared by the rows of one backend), then the fastest configuration
#   (compile=model at 16 x 4, an empty cache: about 280 s to its first step) with cuDNN's attention, the time left
#   allowing (skipped with less than 330 s left); SDPA_MODEL=auto: that row with the default backend instead (the
#   same machine's reference); SDPA_MODEL_ONLY=1: that row alone; SDPA_ONCE=1: A B only;
#   SDPA_MODEL=none: without it; SDPA_BATCH: the A B rows' batch (default 16: 145 GB; 4 fits an 80 GB H100)
# SET=tune: one GPU, Inductor's coordinate-descent tuning of its own Triton kernels (the GroupNorms, SiLUs and
#   other fused pointwise and reduction kernels: runtime coordinate_descent_tuning=true) against the default
#   under compile=blocks at TUNE_BATCH (default 16), in the order A B A B (the second A and B from their caches;
#   TUNE_PROFILE=1: their first steps under cProfile, $OUT/first-step-*.txt and .prof)
# SET=kernels: one GPU, where the step goes and whether Inductor's GEMM templates beat cuBLAS. KERNELS_PART=1: the
#   fastest configuration (compile=model at KERNEL_BATCH, default 16, an empty cache) with 2 steps under torch.profiler
#   ($OUT/kernels-model.json; `python3 scripts/bench_sdxl.py kernels FILE` reads it), then compile=blocks (cold);
#   KERNELS_PART=2, on the same warm machine: compile=blocks with its matrix multiplies autotuned
#   (TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1: cuBLAS against Inductor's Triton templates, the fastest kept; blocks hold
#   every linear layer the step runs but the few outside the transformer blocks), cold, then both again from their
#   caches (A B A B over the two calls), each warm row profiled ($OUT/kernels-blocks*.json).
#   KERNELS_PART=flash: torch 2.11's `auto` attention is cuDNN's (the profile's kernels), so FlashAttention-2 was never
#   measured: compile=blocks with sdpa=auto and sdpa=flash in the order A B A B (the first two profiled), then the
#   whole model compiled with flash (cold, profiled) where the time allows.
#   KERNELS_PART=cat1: SDXL's feed-forward alone, two ways (scripts/bench_geglu.py: diffusers' GEGLU, or its
#   projection split, runtime geglu=split; $OUT/geglu.json; GEGLU_BATCH: its batch, default KERNEL_BATCH), then
#   compile=blocks as it is and with geglu=split, A B A B (the cold two profiled, their kernels in $OUT/kernels.tgz;
#   data/measurements/2026-12-06-h200-geglu-split ran it with a third way, since removed);
#   KERNELS_PART=cat2: the fastest configuration (compile=model at KERNEL_BATCH) with geglu=split and without, each
#   from an empty cache, then from the caches A B A B (what 2026-12-06-h200-geglu-split's model/ rows ran by hand)
#   KERNELS_PART=graphs: that configuration with geglu=split, compile_mode default and reduce-overhead (CUDA graphs),
#   each from an empty cache; GRAPHS_ROUND=warm, on the same warm machine next: both from their caches, B A;
#   GRAPHS_MODES: the modes to run, in order (default "default reduce-overhead"); the whole model's cold compile takes
#   150-330 s a mode on an H200 (a row is cut at 420 s), so both cold modes need about BUDGET=600 (one device call's
#   limit): on a scarce machine run one mode a call, the next call on the same warm machine; GRAPHS_COMPILE=blocks:
#   compile=blocks instead of the whole model; GRAPHS_ACCUM: micro-batches a step (default 1; KERNEL_BATCH=4 GRAPHS_ACCUM=16 is the plan on an H100);
#   GRAPHS_DDP=1: each row in DDP at one process (runner --ddp, ddp_graph=whole); GRAPHS_RESUMED=1: the optimizer's
#   state made before the first step, as a resumed life has it (runner --resumed); GRAPHS_MARKS:
#   where CUDA-graph steps begin, each in turn (default auto; "auto micro": torch's own, then marked at every
#   micro-batch, COSTSIM_GRAPH_STEPS; the rows share one compile cache)
# Every row is its own process with a timeout; each lane stops starting rows at its deadline.
# Results: $OUT/bench_sdxl.jsonl, the table in $OUT/bench_sdxl.txt. Wheels for simpy/diffusers/
# importlib_metadata come in .whl/; torchao for SET=fp8 in .whl-fp8/ (an older one in .whl-fp8/alt for an older torch).
set -uo pipefail
SET=${SET:-main}; OUT=${OUT:-/tmp/out}; BUDGET=${BUDGET:-540}; STEPS=${STEPS:-12}; CONFIG=${CONFIG:-}   # CONFIG: a tiny UNet, to try it on CPU
export PYTHONUNBUFFERED=1
source scripts/gpu_site.sh
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$OUT/gpus.txt"
python3 -c "import torch, diffusers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'diffusers', diffusers.__version__)" >> "$OUT/gpus.txt"
cat "$OUT/gpus.txt"
START=$(date +%s); RESULTS="$OUT/bench_sdxl.jsonl"

row() {   # row GPU LIMIT_S ARGS...: one measurement, unless the lane's time is up
  local gpu=$1 limit=$2; shift 2
  local left=$(( START + BUDGET - $(date +%s) ))
  if (( left < 30 )); then echo "skip (lane $gpu out of time): $*"; return; fi
  (( limit > left )) && limit=$left
  echo "[gpu $gpu, $(( $(date +%s) - START ))s] $*"
  CUDA_VISIBLE_DEVICES=$gpu timeout -k 10 "$limit" python3 scripts/bench_sdxl.py "$@" --results "$RESULTS" --steps "$STEPS" ${CONFIG:+--config "$CONFIG"} \
    >> "$OUT/lane$gpu.log" 2>&1 || echo "{\"part\": \"${1}\", \"label\": \"$*\", \"error\": \"exit $? (timeout or crash)\"}" >> "$RESULTS"
}

lane0() {   # most wanted first: a lane stops starting rows at its deadline
  row 0 60 peak
  row 0 90 bare --batch 8; row 0 90 runner --batch 8
  row 0 90 runner --batch 8 --runtime channels_last=true
  row 0 90 runner --batch 8 --runtime sdpa=cudnn
  row 0 90 bare --batch 4; row 0 90 runner --batch 4
  row 0 90 bare --batch 1; row 0 90 runner --batch 1
  row 0 120 runner --batch 16 --runtime activation_checkpointing=true
  row 0 90 runner --batch 8 --runtime sdpa=efficient
  row 0 90 runner --batch 8 --option adamw=foreach
  row 0 150 runner --batch 32 --runtime activation_checkpointing=true
}

lane1() {  # compiling the whole UNet took > 300 s cold (2026-11-29): blocks first, whole model last
  local c=/tmp/inductor
  TORCHINDUCTOR_CACHE_DIR=$c-blocks row 1 300 runner --batch 8 --runtime compile=blocks
  TORCHINDUCTOR_CACHE_DIR=$c-blocks row 1 120 runner --batch 8 --runtime compile=blocks
  TORCHINDUCTOR_CACHE_DIR=$c-blocks-cl row 1 300 runner --batch 8 --runtime compile=blocks --runtime channels_last=true
  TORCHINDUCTOR_CACHE_DIR=$c-model row 1 600 runner --batch 8 --runtime compile=model
}

next0() {   # cuDNN's benchmark mode; the best configuration so far at batches 12 and 16 (compiled, 8 per
  # GPU peaked at 90 GB: larger batches may fit without activation checkpointing); CUDA graphs and
  # autotuning for the blocks at 8 (compile=blocks gc_every=50 at 8: 17.46 samples/s in the last call)
  local c=/tmp/inductor
  row 0 60 peak
  row 0 90 bare --batch 8
  row 0 90 bare --batch 12
  row 0 90 runner --batch 8 --runtime cudnn_benchmark=true
  TORCHINDUCTOR_CACHE_DIR=$c-b12 row 0 180 runner --batch 12 --runtime compile=blocks --runtime gc_every=50
  TORCHINDUCTOR_CACHE_DIR=$c-b16 row 0 180 runner --batch 16 --runtime compile=blocks --runtime gc_every=50 --runtime expandable_segments=true
  TORCHINDUCTOR_CACHE_DIR=$c-ro row 0 200 runner --batch 8 --runtime compile=blocks --runtime gc_every=50 --runtime compile_mode=reduce-overhead
  TORCHINDUCTOR_CACHE_DIR=$c-mx row 0 420 runner --batch 8 --runtime compile=blocks --runtime gc_every=50 --runtime compile_mode=max-autotune-no-cudagraphs
}

next1() {   # the whole model, cold: a lane to itself
  TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-model row 1 560 runner --batch 8 --runtime compile=model --runtime gc_every=50
}

install_torchao() {
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl-fp8/torchao-*.whl
  local probe="import torch, torchao; from torchao.float8 import convert_to_float8_training; print('torchao', torchao.__version__)"
  if ! python3 -c "$probe" >> "$OUT/gpus.txt" 2>&1; then   # an older torchao for an older torch (.whl-fp8/alt)
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl-fp8/alt/torchao-*.whl
    python3 -c "$probe" >> "$OUT/gpus.txt" 2>&1
  fi
  python3 -c "import diffusers.models.unets.unet_2d_condition" >> "$OUT/gpus.txt" 2>&1 && echo "diffusers imports" >> "$OUT/gpus.txt"
}

fp8() {   # 2026-12-03, one GPU: fp8 linear layers in the blocks (torchao) and the compiled graphs' activation
  # budget (selective recomputation) beside the plan as written (compile=blocks at 8) and at 16, one lane;
  # each row with its own empty compile cache (a restart on a new node pays that)
  local c=/tmp/inductor g="--runtime compile=blocks --runtime gc_every=50"
  install_torchao
  if [[ ${FP8_ROWS:-all} == all ]]; then
    TORCHINDUCTOR_CACHE_DIR=$c-b8 row 0 120 runner --batch 8 $g
    TORCHINDUCTOR_CACHE_DIR=$c-b16-fp8 row 0 150 runner --batch 16 $g --runtime expandable_segments=true --runtime fp8=blocks
    TORCHINDUCTOR_CACHE_DIR=$c-b16 row 0 120 runner --batch 16 $g --runtime expandable_segments=true
  fi
  TORCHINDUCTOR_CACHE_DIR=$c-b8-fp8 row 0 150 runner --batch 8 $g --runtime fp8=blocks
  TORCHINDUCTOR_CACHE_DIR=$c-b24-amb row 0 150 runner --batch 24 $g --runtime expandable_segments=true \
    --runtime activation_memory_budget=0.5
  TORCHINDUCTOR_CACHE_DIR=$c-b32-amb row 0 150 runner --batch 32 $g --runtime expandable_segments=true \
    --runtime activation_memory_budget=0.3
}

accum() {   # a cold whole-model compile (333 s, 2026-11-29) first, then the same graphs from its cache
  local c=/tmp/inductor-model16 g="--runtime compile=model --runtime gc_every=50 --runtime expandable_segments=true"
  TORCHINDUCTOR_CACHE_DIR=$c row 0 480 runner --batch 16 --accumulation 4 $g
  TORCHINDUCTOR_CACHE_DIR=$c row 0 150 runner --batch 16 $g
}

fp8large() {
  local c=/tmp/inductor g="--runtime compile=${FP8_COMPILE:-blocks} --runtime gc_every=50 --runtime expandable_segments=true"
  install_torchao
  [[ -n ${FP8_BASELINE:-} ]] && TORCHINDUCTOR_CACHE_DIR=$c-bf16 row 0 400 runner --batch 16 --accumulation 4 $g
  TORCHINDUCTOR_CACHE_DIR=$c-fp8l row 0 450 runner --batch 16 --accumulation 4 $g --runtime fp8=blocks --runtime fp8_select=large
  local left=$(( START + BUDGET - $(date +%s) ))
  if (( left > 60 )); then   # both ways of taking the manifest's CRCs, in one process
    timeout -k 10 "$left" python3 scripts/bench_checkpoint.py --workload sdxl --batch 8 --notice 4 --skip-sync \
      --staging pinned --dir /tmp/bc > "$OUT/checkpoint.txt" 2>&1 || echo "bench_checkpoint: exit $?" >> "$OUT/checkpoint.txt"
    rm -rf /tmp/bc
  fi
}

channels_last() {
  local g="--runtime compile=model --runtime gc_every=50 --runtime expandable_segments=true"
  row 0 60 peak
  row 0 90 bare --batch 12
  TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-model16-cl row 0 480 runner --batch 16 $g --runtime channels_last=true
}

sdpa() {   # on Hopper, cuDNN's fused attention is 1.7-2.3x FlashAttention-2's for training shapes (transformers
  # PR 48163, 2026-08); torch's default order still puts flash first. Eager at 8 it was 0.98x (2026-11-29); under
  # compile=blocks at 4 on an H100 0.82-1.09x, inside that machine's drift (data/measurements/2026-12-05-h100-sdpa)
  local c=/tmp/inductor g="--runtime gc_every=50 --runtime expandable_segments=true" batch=${SDPA_BATCH:-16}
  row 0 60 peak
  local round
  for round in 1 2; do
    [[ -n ${SDPA_MODEL_ONLY:-} ]] && break
    TORCHINDUCTOR_CACHE_DIR=$c-blocks-auto row 0 150 runner --batch "$batch" --runtime compile=blocks $g
    TORCHINDUCTOR_CACHE_DIR=$c-blocks-cudnn row 0 150 runner --batch "$batch" --runtime compile=blocks $g \
      --runtime sdpa=cudnn
    [[ -n ${SDPA_ONCE:-} ]] && break
  done
  local backend=${SDPA_MODEL:-cudnn} left=$(( START + BUDGET - $(date +%s) ))
  [[ $backend == none ]] && return
  if (( left < 330 )); then   # a cold whole-model compile would be cut: leave it to a call of its own
    echo "skip (${left}s left, a cold whole-model row needs about 330): compile=model sdpa=$backend"; return
  fi
  TORCHINDUCTOR_CACHE_DIR=$c-model-$backend row 0 480 runner --batch 16 --accumulation 4 --runtime compile=model $g \
    --runtime sdpa="$backend"
}

tune() {
  local c=/tmp/inductor g="--runtime compile=blocks --runtime gc_every=50 --runtime expandable_segments=true"
  local batch=${TUNE_BATCH:-16} round
  for round in cold warm; do
    local profile=""   # TUNE_PROFILE=1: the warm rows' first step under cProfile (scripts/profile_diff.py)
    [[ $round == warm && -n ${TUNE_PROFILE:-} ]] && profile=$OUT/first-step
    COSTSIM_PROFILE_FIRST_STEP=${profile:+$profile-default.txt} TORCHINDUCTOR_CACHE_DIR=$c-auto row 0 200 \
      runner --batch "$batch" $g --label "compile=blocks ($round)"
    COSTSIM_PROFILE_FIRST_STEP=${profile:+$profile-cd.txt} TORCHINDUCTOR_CACHE_DIR=$c-cd row 0 320 \
      runner --batch "$batch" $g --runtime coordinate_descent_tuning=true --label "compile=blocks coordinate descent ($round)"
  done
}

kernels() {
  local c=/tmp/inductor g="--runtime gc_every=50 --runtime expandable_segments=true" batch=${KERNEL_BATCH:-16}
  if [[ ${KERNELS_PART:-1} == cat1 ]]; then
    echo "[geglu, $(( $(date +%s) - START ))s]"
    timeout -k 10 200 python3 scripts/bench_geglu.py --batch "${GEGLU_BATCH:-$batch}" --out "$OUT/geglu.json" 2>&1 \
      | tee -a "$OUT/lane0.log"
    local round
    for round in cold warm; do   # A B A B: diffusers' GEGLU as it is, and geglu=split
      local k=""; [[ $round == cold ]] && k=1
      TORCHINDUCTOR_CACHE_DIR=$c-blocks row 0 170 runner --batch "$batch" --runtime compile=blocks $g \
        ${k:+--kernels "$OUT/kernels-blocks.json"} --label "compile=blocks ($round)"
      TORCHINDUCTOR_CACHE_DIR=$c-blocks-split row 0 170 runner --batch "$batch" --runtime compile=blocks $g \
        --runtime geglu=split ${k:+--kernels "$OUT/kernels-blocks-split.json"} \
        --label "compile=blocks geglu=split ($round)"
    done
    (cd "$OUT" && tar czf kernels.tgz kernels-*.json && rm kernels-*.json)   # $OUT brings back 8 files at most
  elif [[ ${KERNELS_PART:-1} == cat2 ]]; then
    local way
    for way in split fused; do   # each from an empty cache (142-333 s to the first step), then A B A B from the caches
      TORCHINDUCTOR_CACHE_DIR=$c-model-$way row 0 420 runner --batch "$batch" --runtime compile=model $g \
        --runtime geglu=$way --label "compile=model geglu=$way (cold)"
    done
    for round in 1 2; do
      for way in fused split; do
        TORCHINDUCTOR_CACHE_DIR=$c-model-$way row 0 120 runner --batch "$batch" --runtime compile=model $g \
          --runtime geglu=$way --label "compile=model geglu=$way (warm $round)"
      done
    done
  elif [[ ${KERNELS_PART:-1} == graphs ]]; then
    # CUDA graphs (compile_mode=reduce-overhead) for the fastest configuration: the step's launch gaps (20 ms of GPU
    # idle a step, 2026-12-05-h200-kernels). Each from an empty cache; GRAPHS_ROUND=warm on the same machine after it:
    # both again from their caches, in the order B A (the cold pair ran A B)
    local mode modes="default reduce-overhead"
    [[ ${GRAPHS_ROUND:-cold} == warm ]] && modes="reduce-overhead default"
    modes=${GRAPHS_MODES:-$modes}   # e.g. reduce-overhead alone, where the time allows one cold compile
    local how=${GRAPHS_COMPILE:-model} accum=${GRAPHS_ACCUM:-1}   # blocks, 4 and 16: the plan as written on an H100
    local mark
    for mode in $modes; do
      for mark in ${GRAPHS_MARKS:-auto}; do   # COSTSIM_GRAPH_STEPS (runner.train.graph_steps); one compile cache
        local tag="" ddp=""; [[ $mark == micro ]] && tag=" marked"
        # GRAPHS_DDP=1: in DDP at one process (its hooks, buckets and all-reduce; ddp_graph=whole, the shipped H200
        # setting: one compiled graph, whose cache the row without DDP shares)
        [[ -n ${GRAPHS_DDP:-} ]] && ddp="--ddp --runtime ddp_graph=whole" && tag="$tag ddp"
        # GRAPHS_RESUMED=1: the optimizer's state made before the first step, as a resumed life has it
        [[ -n ${GRAPHS_RESUMED:-} ]] && ddp="$ddp --resumed" && tag="$tag resumed"
        COSTSIM_GRAPH_STEPS=$mark TORCHINDUCTOR_CACHE_DIR=$c-$how-split-$mode-$batch row 0 420 runner --batch "$batch" \
          --accumulation "$accum" --runtime compile=$how $g --runtime geglu=split --runtime compile_mode=$mode $ddp \
          --label "compile=$how geglu=split $mode ${batch}x$accum$tag (${GRAPHS_ROUND:-cold})"
      done
    done
  elif [[ ${KERNELS_PART:-1} == flash ]]; then
    local round
    for round in cold warm; do
      local k=""; [[ $round == cold ]] && k=1
      TORCHINDUCTOR_CACHE_DIR=$c-blocks row 0 150 runner --batch "$batch" --runtime compile=blocks $g \
        ${k:+--kernels "$OUT/kernels-blocks-auto.json"} --label "compile=blocks ($round)"
      TORCHINDUCTOR_CACHE_DIR=$c-blocks-flash row 0 150 runner --batch "$batch" --runtime compile=blocks $g \
        --runtime sdpa=flash ${k:+--kernels "$OUT/kernels-blocks-flash.json"} --label "compile=blocks sdpa=flash ($round)"
    done
    TORCHINDUCTOR_CACHE_DIR=$c-model-flash row 0 420 runner --batch "$batch" --runtime compile=model $g \
      --runtime sdpa=flash --kernels "$OUT/kernels-model-flash.json" --label "compile=model sdpa=flash (cold)"
  elif [[ ${KERNELS_PART:-1} == 1 ]]; then
    TORCHINDUCTOR_CACHE_DIR=$c-model row 0 420 runner --batch "$batch" --runtime compile=model $g \
      --kernels "$OUT/kernels-model.json" --label "compile=model (cold)"
    TORCHINDUCTOR_CACHE_DIR=$c-blocks row 0 150 runner --batch "$batch" --runtime compile=blocks $g \
      --label "compile=blocks (cold)"
  else
    TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1 TORCHINDUCTOR_CACHE_DIR=$c-blocks-gemm row 0 330 runner --batch "$batch" \
      --runtime compile=blocks $g --label "compile=blocks, GEMMs autotuned (cold)"
    TORCHINDUCTOR_CACHE_DIR=$c-blocks row 0 110 runner --batch "$batch" --runtime compile=blocks $g \
      --kernels "$OUT/kernels-blocks.json" --label "compile=blocks (warm)"
    TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1 TORCHINDUCTOR_CACHE_DIR=$c-blocks-gemm row 0 110 runner --batch "$batch" \
      --runtime compile=blocks $g --kernels "$OUT/kernels-blocks-gemm.json" --label "compile=blocks, GEMMs autotuned (warm)"
  fi
}

export -f row; export START BUDGET STEPS RESULTS OUT CONFIG
if [[ "$SET" == next ]]; then next0 & next1 & wait
elif [[ "$SET" == fp8 ]]; then fp8
elif [[ "$SET" == accum ]]; then accum
elif [[ "$SET" == fp8large ]]; then fp8large
elif [[ "$SET" == cl ]]; then channels_last
elif [[ "$SET" == sdpa ]]; then sdpa
elif [[ "$SET" == tune ]]; then tune
elif [[ "$SET" == kernels ]]; then kernels
else lane0 & lane1 & wait; fi
[[ -f /tmp/bench_sdxl.jsonl && ${KERNELS_PART:-} == 2 ]] && cat /tmp/bench_sdxl.jsonl "$RESULTS" > /tmp/both.jsonl \
  && cp /tmp/both.jsonl "$RESULTS"   # the table over both calls
cp "$RESULTS" /tmp/bench_sdxl.jsonl   # a follow-up call on the same (warm) machine reads it; $OUT is emptied
python3 scripts/bench_sdxl.py report "$RESULTS" | tee "$OUT/bench_sdxl.txt"
