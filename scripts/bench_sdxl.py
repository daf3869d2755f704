"""SDXL UNet training speed on one GPU: the hardware's limit, a bare loop, the runner's loop, options.

Each measurement runs in its own process (a fresh CUDA context and compiler state; an out-of-memory
or a compiler failure costs only that row) and appends one JSON line to RESULTS:

  peak                      bf16 matrix-multiply rate (8192^3, rotating inputs, CUDA events, median)
  bare   --batch B          a hand-written step: UNet from config, bf16 autocast, fused AdamW,
                            latents drawn on the GPU; also counts the step's FLOPs with
                            torch.utils.flop_counter (matmul, convolution and attention)
  runner --batch B [--accumulation N] [--runtime K=V ...] [--option K=V ...]
                            the runner's own Trainer (telemetry, sync points; no DDP wrapper at
                            world size 1) in this process; first-step time = build + compile (cold or warm cache);
                            with N micro-batches of B a step (a plan's global batch on fewer GPUs: the
                            optimizer's step then comes once every N micro-batches)
                            --ddp: the model in DDP all the same (its gradient hooks, buckets and
                            all-reduce, on one GPU); each row records its last step's loss
                            --kernels FILE: then --kernel-steps more steps under torch.profiler,
                            every kernel's count and GPU time written to FILE (JSON)
  report RESULTS            the table: samples/s per GPU, ratio to the bare loop at the same batch,
                            MFU (model FLOPs / peak), peak memory, first-step time
  kernels FILE [--flops] [--top N]  where a profiled step's GPU time goes: convolutions, matrix multiplies,
                            attention, Inductor's fused kernels, the optimizer, copies; and the
                            GPU's idle share of the steps' wall time; --flops: each compute kind's
                            FLOPs (the model's step on the meta device: no GPU) and its rate

Usage on the device: scripts/gpu_sdxl_bench.sh; on CPU, with a tiny config, for testing:
  python3 scripts/bench_sdxl.py bare --batch 2 --config tests/data/tiny_unet_config.json --results r.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from costsim.runtime import Runtime, parse_pairs  # noqa: E402  (no torch: the report and `best` run anywhere)


def _device():
    import torch
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def _sync(device) -> None:
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_memory_gb(device) -> float | None:
    import torch
    return torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None


def _peak_reserved_gb(device) -> float | None:
    """The caching allocator's reserved peak: what the card must hold. Under CUDA graphs the allocated peak
    (`_peak_memory_gb`) reads far lower (52.3 against 73.3 GB reserved on an H100 at 4 x 16, 2026-12-06): the
    replays run in the graphs' own memory pool without allocating."""
    import torch
    return torch.cuda.max_memory_reserved(device) / 1e9 if device.type == "cuda" else None


def peak(args) -> dict:
    """The practical bf16 matmul ceiling of this GPU."""
    import torch
    n, device = args.size, _device()
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    sets = [(torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype))
            for _ in range(3)]
    for a, b in sets:
        a @ b
    times = []
    for i in range(args.repeats):
        a, b = sets[i % 3]
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t)
    seconds = statistics.median(times)
    return {"part": "peak", "tflops": 2 * n ** 3 / seconds / 1e12, "size": n, "dtype": str(dtype)}


def bare(args) -> dict:
    """A hand-written training step, nothing of the runner's: the loop to beat."""
    import torch
    from diffusers import UNet2DConditionModel
    from torch.utils.flop_counter import FlopCounterMode

    from runner.workloads.latents import expected_shapes
    from runner.workloads.sdxl import TRAIN_TIMESTEPS, load_config

    device, b = _device(), args.batch
    config = load_config(args.config)
    shapes = expected_shapes(config)
    (channels, size, _), text_dim, pooled = shapes["latents"], shapes["text"][1], shapes["pooled"][0]
    built_at = time.perf_counter()
    with device:
        model = UNet2DConditionModel.from_config(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=1e-2,
                                  **({"fused": True} if device.type == "cuda" else {}))
    alphas = torch.cumprod(1 - torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, TRAIN_TIMESTEPS) ** 2, 0).to(device)
    time_ids = torch.tensor([[size * 8.0] * 2 + [0.0] * 2 + [size * 8.0] * 2], device=device).expand(b, 6)
    dtype = torch.bfloat16

    def step():
        latents = torch.randn(b, channels, size, size, device=device)
        noise = torch.randn(b, channels, size, size, device=device)
        t = torch.randint(0, TRAIN_TIMESTEPS, (b,), device=device)
        a = alphas[t].view(-1, 1, 1, 1)
        with torch.autocast(device.type, dtype=dtype):
            out = model(a.sqrt() * latents + (1 - a).sqrt() * noise, t,
                        encoder_hidden_states=torch.randn(b, 77, text_dim, device=device),
                        added_cond_kwargs={"text_embeds": torch.randn(b, pooled, device=device),
                                           "time_ids": time_ids}).sample
            loss = torch.nn.functional.mse_loss(out.float(), noise)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    _sync(device)
    first_s = time.perf_counter() - built_at
    with FlopCounterMode(display=False) as counter:
        step()
    flops = counter.get_total_flops()
    seconds = _timed(step, device, args.warmup, args.steps)
    return {"part": "bare", "batch": b, "samples_per_s": args.steps * b / seconds, "step_s": seconds / args.steps,
            "flops_per_step": flops, "peak_memory_gb": _peak_memory_gb(device),
            "peak_reserved_gb": _peak_reserved_gb(device), "first_step_s": first_s}


def _timed(step, device, warmup: int, steps: int) -> float:
    for _ in range(warmup):
        step()
    _sync(device)
    started = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return time.perf_counter() - started


def runner(args) -> dict:
    """The runner's Trainer, in this process (world size 1), timed between two synchronised points."""
    import torch
    import torch.distributed as dist

    from runner import speed, train
    from runner.plan import load_run_spec
    from runner.workerenv import worker_env

    device = _device()
    work = Path(tempfile.mkdtemp(prefix="bench-sdxl-"))
    worker_env(parse_pairs(args.runtime), work / "run", os.environ)   # as the runner's workers get it
    options = ([f"config={args.config}"] if args.config else []) + list(args.option)
    plan = _plan(work, args.batch, "H200" if device.type == "cuda" else "cpu", args.accumulation,
                 runtime=parse_pairs(args.runtime), steps=args.warmup, options=dict(o.split("=", 1) for o in options))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    spec = load_run_spec(plan)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend="cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo")
    worker_args = train.parse(["--plan", str(plan), "--run-dir", str(work / "run"), "--run-id", "bench"])
    started = time.perf_counter()
    trainer = train.Trainer(worker_args, spec, 0, 1, 0, ddp=args.ddp)
    assert trainer.accumulation == args.accumulation, (trainer.accumulation, args.accumulation)
    if args.resumed:   # as a resumed life's restore makes it: the optimizer's state before the first step
        from runner.state import make_optimizer_state
        make_optimizer_state(trainer.built.optimizer)
    built_s = time.perf_counter() - started
    trainer.total_steps = 1
    trainer.train()           # the first step: compilation (if any), autotuning, allocation
    _sync(device)
    first_s = time.perf_counter() - started
    first_peak = _peak_memory_gb(device), _peak_reserved_gb(device)   # through the first step
    compiled = speed.compile_report() if trainer.compiled else None   # the first step's cache hits and misses
    trainer.total_steps = args.warmup
    trainer.train()
    _sync(device)
    t0 = time.perf_counter()
    trainer.total_steps = args.warmup + args.steps
    trainer.train()
    _sync(device)
    seconds = time.perf_counter() - t0
    loss = trainer.mean_loss()   # the last timed step's: rows of one training (same seed, batch) compare on it
    wrapped = isinstance(trainer.model, torch.nn.parallel.DistributedDataParallel)   # what ran, not what was asked
    collections, gc_s = trainer.garbage.collections, trainer.garbage.seconds
    if args.kernels:
        _profile_kernels(trainer, device, args.kernel_steps, Path(args.kernels),
                         label=args.label or trainer.runtime.describe(), batch=args.batch * args.accumulation)
    memory = speed.memory_report(device)
    trainer.close()
    dist.destroy_process_group()
    accumulated = f" accumulation={args.accumulation}" if args.accumulation > 1 else ""
    return {"part": "runner", "batch": args.batch, "accumulation": args.accumulation, "ddp": wrapped,
            "ddp_buckets": trainer.ddp_buckets, "resumed": args.resumed,
            "first_step_peak_gb": first_peak[0], "first_step_peak_reserved_gb": first_peak[1],
            "runtime": trainer.runtime.as_dict(), "loss": loss,
            "label": args.label or (trainer.runtime.describe() + accumulated + " ddp" * wrapped + " resumed" * args.resumed
                                    + "".join(f" {o}" for o in args.option)),
            "samples_per_s": args.steps * args.batch * args.accumulation / seconds, "step_s": seconds / args.steps,
            "peak_memory_gb": _peak_memory_gb(device), "peak_reserved_gb": _peak_reserved_gb(device),
            "build_s": built_s, "first_step_s": first_s,
            "compile_cache": _cache_state(trainer.runtime, work), "compile": compiled,
            "gc_collections": collections, "gc_s": gc_s,
            "alloc_retries": memory.get("alloc_retries")}


def _profile_kernels(trainer, device, steps: int, path: Path, **about) -> None:
    """`steps` more steps under torch.profiler: each kernel's (or, on CPU, each op's) count and self time."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CUDA] if device.type == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        started = time.perf_counter()
        trainer.total_steps += steps
        trainer.train()
        _sync(device)
        wall_s = time.perf_counter() - started
    kernels = []
    for event in prof.key_averages():
        us = event.self_device_time_total if device.type == "cuda" else event.self_cpu_time_total
        if us > 0:
            kernels.append({"name": event.key, "count": event.count, "us": us})
    kernels.sort(key=lambda k: -k["us"])
    record = {**about, "steps": steps, "wall_s": wall_s, "device": str(device), "torch": torch.__version__,
              "kernels": kernels}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)


# kernel name -> kind, first match wins: cuDNN's attention kernels say "sdpa" and "fprop" (before convolutions);
# cuDNN's convolutions are implicit GEMMs (before matrix multiplies); cuDNN's layout changes (NCHW <-> NHWC around
# each convolution) are copies; Inductor's generated kernels (triton_poi/red/per_...) name the ops they fuse
# (before the eager kinds); its GEMM templates are triton_tem_ (matrix multiplies)
KERNEL_KINDS = (
    ("attention", r"sdpa|flash|fmha|attention|softmax_warp"),
    ("layout change (cuDNN)", r"nchwToNhwc|nhwcToNchw"),
    ("convolution", r"conv|fprop|dgrad|wgrad|implicit_gemm|cudnn"),
    ("matrix multiply", r"gemm|nvjet|cutlass|cublas|matmul|triton_tem_|bmm|addmm|::mm$|::linear"),
    ("optimizer", r"multi_tensor|adam|fused_optim"),
    ("Inductor fused (triton)", r"^triton_"),
    ("copy / fill", r"memcpy|memset|copy|fill"),
    ("norm / activation (eager)", r"norm|silu|gelu|elementwise|vectorized|reduce"),
)


def kernel_kinds(record: dict) -> list[tuple[str, float, int]]:
    """(kind, seconds per step, kernels per step) for a `--kernels` record, largest first."""
    import re
    totals: dict[str, list[float]] = {}
    for k in record["kernels"]:
        kind = next((name for name, pattern in KERNEL_KINDS if re.search(pattern, k["name"], re.I)), "other")
        entry = totals.setdefault(kind, [0.0, 0])
        entry[0] += k["us"] / 1e6 / record["steps"]
        entry[1] += k["count"] / record["steps"]
    return sorted(((kind, s, int(n)) for kind, (s, n) in totals.items()), key=lambda r: -r[1])


def flops_by_kind(batch: int, config: str | None = None) -> dict[str, float]:
    """FLOPs of one training step's forward and backward at `batch`, by kind, counted on the meta device (shapes
    only: no memory, no GPU). Attention on the meta device takes the math path: its batched matrix multiplies are
    the useful FLOPs (forward 2, backward 4), not a fused kernel's recomputation."""
    import torch
    from diffusers import UNet2DConditionModel
    from torch.utils.flop_counter import FlopCounterMode

    from runner.workloads.latents import expected_shapes
    from runner.workloads.sdxl import load_config
    cfg = load_config(config)
    shapes = expected_shapes(cfg)
    text_dim, pooled = shapes["text"][1], shapes["pooled"][0]
    with torch.device("meta"):
        model = UNet2DConditionModel.from_config(cfg)
        with FlopCounterMode(display=False) as counter:
            out = model(torch.randn(batch, *shapes["latents"]), torch.randint(0, 1000, (batch,)),
                        encoder_hidden_states=torch.randn(batch, 77, text_dim),
                        added_cond_kwargs={"text_embeds": torch.randn(batch, pooled),
                                           "time_ids": torch.randn(batch, 6)}).sample
            out.float().pow(2).mean().backward()
    kinds = {"mm": "matrix multiply", "addmm": "matrix multiply", "convolution": "convolution",
             "convolution_backward": "convolution", "bmm": "attention"}
    totals: dict[str, float] = {}
    for op, flops in counter.get_flop_counts()["Global"].items():
        kind = kinds.get(getattr(op, "__name__", str(op)).split(".")[0], "other")
        totals[kind] = totals.get(kind, 0.0) + flops
    return totals


def kernels_report(path: Path, top: int = 15, flops: bool = False) -> str:
    record = json.loads(Path(path).read_text())
    rows = kernel_kinds(record)
    busy = sum(s for _, s, _ in rows)
    step = record["wall_s"] / record["steps"]
    counted = flops_by_kind(record["batch"]) if flops else {}
    lines = [f"{record.get('label', '')}, batch {record.get('batch')}: {record['steps']} profiled steps on "
             f"{record.get('device')}, {step:.3f} s a step, the device busy {busy:.3f} s of it ({busy / step:.1%}; "
             "on a CPU the ops' self times)",
             f"{'kind':<28}{'s/step':>9}{'share':>8}{'kernels':>9}" + (f"{'TFLOP':>8}{'TFLOP/s':>9}" if flops else "")]
    for kind, s, n in rows:
        rate = f"{counted[kind] / 1e12:>8.1f}{counted[kind] / s / 1e12:>9.0f}" if kind in counted else ""
        lines.append(f"{kind:<28}{s:>9.3f}{s / busy:>8.1%}{n:>9}{rate}")
    lines.append(f"{'all':<28}{busy:>9.3f}{1:>8.1%}{sum(n for _, _, n in rows):>9}")
    lines.append(f"the {top} longest kernels (s/step, count/step):")
    for k in record["kernels"][:top]:
        lines.append(f"  {k['us'] / 1e6 / record['steps']:8.4f} {k['count'] / record['steps']:6.0f}  {k['name'][:100]}")
    return "\n".join(lines)


def _cache_state(runtime, work: Path) -> str | None:
    """cold or warm: whether the compile cache held anything when the Trainer started."""
    if runtime.compile == "off":
        return None
    from costsim.contract.telemetry import read_events
    event = next((e for e in read_events(work / "run") if e["event"] == "runtime"), {})
    return "warm" if event.get("compile_cache_bytes") else "cold"


def _plan(folder: Path, batch: int, gpu: str, accumulation: int = 1, **run) -> Path:
    """A one-GPU plan at this micro-batch, as `runner execute` would write it (runner.plan.effective_plan)."""
    from costsim import io as cio
    from runner.plan import effective_plan
    from runner.profile import synthetic_plan
    workload = cio.load_workload("sdxl")
    synthetic = synthetic_plan(workload, cio.load_profile(workload.profile), gpu, 1, batch, accumulation)
    return effective_plan(synthetic, final_save=False, **run).write(folder / "plan.json")


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report(path: Path) -> str:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    peaks = [r for r in rows if r["part"] == "peak"]
    top = next((r for r in peaks if "tflops" in r), None)
    bares = {r["batch"]: r for r in rows if r["part"] == "bare" and "samples_per_s" in r}
    flops_per_sample = {b: r["flops_per_step"] / b for b, r in bares.items()}
    per_sample = statistics.median(flops_per_sample.values()) if flops_per_sample else None
    lines = []
    if top:
        lines.append(f"bf16 matmul peak: {top['tflops']:.0f} TFLOP/s ({top['size']}^3)")
    elif peaks:
        lines.append(f"bf16 matmul peak: not measured ({peaks[-1].get('error')}); no MFU")
    if per_sample:
        lines.append(f"model FLOPs per training sample (flop counter, fwd+bwd): {per_sample / 1e12:.2f} TFLOP")
    fastest = max((r["samples_per_s"] for r in bares.values()), default=None)
    if fastest:   # the goal's yardstick: the plain loop at its own best batch
        lines.append(f"fastest bare loop: {fastest:.2f} samples/s ('vs best' divides by it; 'vs bare': same batch)")
    def named(r: dict) -> str:
        label = "bare hand-written loop" if r["part"] == "bare" else f"runner: {r.get('label', '')}"
        return label + (f" [{r['compile_cache']} cache]" if r.get("compile_cache") else "")

    # the loop column as wide as its longest label (labels tell rows apart at their ends: "(warm)", "marked")
    width = max([len(named(r)) + 1 for r in rows if r["part"] in ("bare", "runner")] + [30])
    head = (f"{'loop':<{width}}{'batch':>6}{'samples/s':>11}{'vs bare':>9}{'vs best':>9}{'MFU':>7}{'alloc GB':>9}"
            f"{'resv GB':>8}{'first step s':>14}{'graphs s':>10}")
    lines += [head, "-" * len(head)]
    for r in rows:
        if r["part"] not in ("bare", "runner"):
            continue
        label = named(r)
        accumulation = r.get("accumulation", 1)
        batch = f"{r.get('batch', '')}x{accumulation}" if accumulation > 1 else str(r.get("batch", ""))
        if "error" in r:
            lines.append(f"{label:<{width}}{batch:>6}  {r['error'][:60]}")
            continue
        base = bares.get(r["batch"]) if accumulation == 1 else None
        ratio = f"{r['samples_per_s'] / base['samples_per_s']:.3f}" if base else ""
        versus_best = f"{r['samples_per_s'] / fastest:.3f}" if fastest else ""
        mfu = f"{r['samples_per_s'] * per_sample / 1e12 / top['tflops']:.3f}" if per_sample and top else ""
        mem = f"{r['peak_memory_gb']:.1f}" if r.get("peak_memory_gb") else ""
        reserved = f"{r['peak_reserved_gb']:.1f}" if r.get("peak_reserved_gb") else ""   # rows since 2026-12-06
        # of the first step, the seconds torch spent recording CUDA graphs (compile_times; rows since 2026-12-06)
        recorded = ((r.get("compile") or {}).get("phases_s") or {}).get("CUDAGraphNode.record")
        graphs = f"{recorded:.1f}" if recorded is not None else ""
        lines.append(f"{label:<{width}}{batch:>6}{r['samples_per_s']:>11.2f}{ratio:>9}{versus_best:>9}{mfu:>7}{mem:>9}"
                     f"{reserved:>8}{r.get('first_step_s', 0):>14.1f}{graphs:>10}")
    return "\n".join(lines)


def best(path: Path, batch: int) -> list[str]:
    """The fastest runner configuration at `batch`, as --runtime arguments (what the drill runs)."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    runs = [r for r in rows if r["part"] == "runner" and r.get("batch") == batch and "samples_per_s" in r
            and not any(o for o in r.get("label", "").split() if o.startswith("adamw="))]
    if not runs:
        return []
    top = max(runs, key=lambda r: r["samples_per_s"])
    default = Runtime().as_dict()
    return [f"--runtime {k}={str(v).lower() if isinstance(v, bool) else v}"
            for k, v in top["runtime"].items() if default.get(k) != v]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["peak", "bare", "runner", "report", "best", "kernels"])
    parser.add_argument("path", nargs="?", help="report: the results file")
    parser.add_argument("--results", default="bench_sdxl.jsonl", help="JSON lines, appended")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--accumulation", type=int, default=1, help="runner: micro-batches of --batch a step")
    parser.add_argument("--ddp", action="store_true",
                        help="runner: the model in DDP although one process runs it (its hooks, buckets and all-reduce)")
    parser.add_argument("--resumed", action="store_true",
                        help="runner: the optimizer's state made before the first step, as a resumed life has it (the "
                             "row's first_step_peak_gb: that step's peak)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--config", help="a UNet config (default: the SDXL one in data/models)")
    parser.add_argument("--runtime", action="append", default=[])
    parser.add_argument("--option", action="append", default=[])
    parser.add_argument("--label")
    parser.add_argument("--kernels", help="runner: profile --kernel-steps more steps, the kernels to this JSON file")
    parser.add_argument("--kernel-steps", type=int, default=2)
    parser.add_argument("--flops", action="store_true", help="kernels: each compute kind's FLOPs and rate")
    parser.add_argument("--top", type=int, default=15, help="kernels: how many of the longest kernels to list")
    args = parser.parse_args()
    if args.part == "kernels":
        print(kernels_report(Path(args.path), top=args.top, flops=args.flops))
        return
    if args.part == "report":
        print(report(Path(args.path or args.results)))
        return
    if args.part == "best":
        print(" ".join(best(Path(args.path or args.results), args.batch)))
        return
    try:
        result = {"peak": peak, "bare": bare, "runner": runner}[args.part](args)
    except Exception as exc:   # one failed row (out of memory, a compiler error) must not lose the others
        result = {"part": args.part, "batch": args.batch, "accumulation": args.accumulation,
                  "label": args.label or " ".join(args.runtime + args.option),
                  "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    result["t"] = time.time()
    with open(args.results, "a") as handle:
        handle.write(json.dumps(result) + "\n")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
