#!/usr/bin/env python3
"""A compile=model start with and without runtime.precompile, side by side: the first step from an empty compile
cache (cold: what a job's first start pays) and from the cache that start left (warm: what a restart pays), then
the steady step, for the SDXL UNet built from its config (random weights), each start a process of its own:

    python3 scripts/bench_precompile.py [--device cuda] [--mode default|reduce-overhead] [--batch N] [--steps N]
        [--config FILE] [--ways plain,precompile] [--runtime K=V ...]

`plain` is the runner's compile=model (Module.compile: Dynamo traces the whole model at every start, its Inductor
and AOTAutograd caches answering from the second); `precompile` the same with runtime.precompile=true
(runner.precompile: the second start loads the compiled forward and backward and traces nothing). Both run through
runner.speed.prepare_model, each way with a compile cache of its own, in the order plain cold, plain warm,
precompile cold, precompile warm. With --share-cache both ways share one cache: a later way's first start ("cold*")
then finds what Inductor's and AOTAutograd's caches hold of the earlier way's, which leaves the warm figures as they
are. That helps where the ways' graphs match (the tiny UNet on the CPU: precompile's cold* 54 s after plain, against
106 s cold) and not where they do not (the full SDXL UNet on an H100: plain's cold* after precompile had not ended
in 270 s; run the ways in two calls there, `--ways plain` and `--ways precompile`, and compare the printed losses).
A step is one micro-batch's forward and backward under bf16 autocast and an
AdamW step, as the runner's; under CUDA graphs (--mode reduce-overhead) each step is marked as a new one. Prints
each start's figures, then the ratios precompile / plain of the warm first step and of the steady step, and whether
the two ways' losses agree.

On CPU with the tiny UNet (tests/data/tiny_unet_config.json) for trying it: `--config tests/data/tiny_unet_config.json
--batch 2`; with SDXL's own depth at a narrow width (Dynamo's tracing as the full model's): `--config narrow --batch 2`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costsim.errors import InputError  # noqa: E402
from costsim.runtime import parse_pairs  # noqa: E402  (no torch in the parent process)

if TYPE_CHECKING:   # torch only in the children (the parent process runs without it)
    import torch

SDXL_CONFIG = ROOT / "data" / "models" / "sdxl_unet_config.json"
TEXT_TOKENS = 77
OWN_SETTINGS = ("compile", "compile_mode", "ddp_graph", "precompile")   # what each way is


def sdxl_batch(config: dict, batch: int, device) -> tuple[tuple, dict, torch.Tensor]:
    """A micro-batch for a UNet of `config`, drawn from a generator seeded 1 on `device`: the UNet's positional
    inputs (latents, timesteps), its keyword inputs (text states, SDXL's added conditions) and the target."""
    import torch
    size = config["sample_size"]
    pooled = config["projection_class_embeddings_input_dim"] - 6 * config["addition_time_embed_dim"]
    generator = torch.Generator(device).manual_seed(1)

    def draw(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    inputs = (draw(batch, config["in_channels"], size, size), torch.randint(0, 1000, (batch,), device=device))
    kwargs = {"encoder_hidden_states": draw(batch, TEXT_TOKENS, config["cross_attention_dim"]), "return_dict": False,
              "added_cond_kwargs": {"text_embeds": draw(batch, pooled), "time_ids": draw(batch, 6)}}
    return inputs, kwargs, draw(batch, config["out_channels"], size, size)


def one(args) -> dict:
    """In this process: build, apply the way's settings, run the steps; the figures as a dict."""
    import torch
    from diffusers import UNet2DConditionModel

    from runner import precompile, speed
    device = torch.device(args.device)
    runtime = parse_pairs(["compile=model", "ddp_graph=whole", f"compile_mode={args.mode}",
                           f"precompile={'true' if args.one == 'precompile' else 'false'}", *args.runtime])
    if args.config == "narrow":
        from bench_compile_regions import narrow_config  # this script's folder is on the path when it runs
        config = narrow_config()
    else:
        config = json.loads(Path(args.config).read_text())
    torch.manual_seed(0)
    started = time.perf_counter()
    with device:
        model = UNet2DConditionModel.from_config(config)
    speed.configure_backends(runtime)
    speed.prepare_model(model, runtime)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
    inputs, kwargs, target = sdxl_batch(config, args.batch, device)
    built_s = time.perf_counter() - started

    def step() -> torch.Tensor:   # the loss, on the device (read once the steps are done)
        if runtime.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = model(*inputs, **kwargs)[0]
        loss = torch.nn.functional.mse_loss(out.float(), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)   # a gradient kept across steps would be a CUDA graph's output
        return loss.detach()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    losses = []
    started = time.perf_counter()
    losses.append(step())
    sync()
    first = time.perf_counter() - started
    times = []
    for _ in range(args.steps):
        started = time.perf_counter()
        losses.append(step())
        sync()
        times.append(time.perf_counter() - started)
    steady = sorted(times)[len(times) // 2]
    recorded = None
    if runtime.cuda_graphs:
        from torch._inductor import cudagraph_trees
        manager = cudagraph_trees.get_manager(device.index or 0, create_if_none_exists=False)
        recorded = sum(len(nodes) for nodes in manager.roots.values()) if manager is not None else 0
    from torch._dynamo.utils import compile_times

    from runner import autotune_kept, inductor_bytecode
    names, values = compile_times(repr="csv", aggregate=True)
    loads = dict(zip(map(str, names), map(str, values))).get("PyCodeCache.load_by_key_path")
    return {"way": args.one, "build_s": round(built_s, 3), "first_step_s": round(first, 3),
            # Inductor's generated modules loaded (runner.inductor_bytecode: from kept bytecode or compiled)
            "module_loads_s": float(loads) if loads else None,
            "inductor_bytecode": inductor_bytecode.report().get("inductor_bytecode"),
            "kept_autotune": autotune_kept.report().get("kept_autotune"),   # unless COSTSIM_KEPT_AUTOTUNE=0
            "steady_step_s": round(steady, 5), "cuda_graphs_recorded": recorded,
            "losses": [float(x) for x in losses], "precompiled": precompile.events(model),
            "autotune": speed.autotune_report() if device.type == "cuda" else None,
            "peak_gb": round(torch.cuda.max_memory_allocated(device) / 1e9, 2) if device.type == "cuda" else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU machine")
    parser.add_argument("--mode", default="default", choices=["default", "reduce-overhead"],
                        help="torch.compile mode (reduce-overhead: CUDA graphs, GPU only)")
    parser.add_argument("--batch", type=int, default=4, help="samples a step (default 4: an H100's under CUDA graphs)")
    parser.add_argument("--steps", type=int, default=6, help="steady steps after the first (default 6)")
    parser.add_argument("--config", default=str(SDXL_CONFIG),
                        help="the UNet's config (default: SDXL's), or narrow: SDXL's blocks and depth at a narrow width "
                             "(scripts/bench_compile_regions.py's; the same tracing work, little compute)")
    parser.add_argument("--ways", default="plain,precompile", help="comma-separated: plain, precompile")
    parser.add_argument("--runtime", action="append", default=[], metavar="K=V",
                        help="more runner settings for both ways, e.g. geglu=split")
    parser.add_argument("--share-cache", action="store_true",
                        help="one compile cache for every way (a later way's cold start finds what the caches "
                             "hold of the earlier way's: shorter where their graphs match; the warm figures unchanged)")
    parser.add_argument("--one", choices=["plain", "precompile"], help=argparse.SUPPRESS)   # a child's way
    args = parser.parse_args()
    if args.mode == "reduce-overhead" and not args.device.startswith("cuda"):
        parser.error("--mode reduce-overhead records CUDA graphs: give --device cuda, or use --mode default")
    own = [pair for pair in args.runtime if pair.split("=", 1)[0] in OWN_SETTINGS]
    if own:
        parser.error(f"--runtime {own[0]}: this benchmark sets {', '.join(OWN_SETTINGS)} itself (--mode, --ways)")
    try:   # bad input: now, in one line
        parse_pairs(["compile=model", "ddp_graph=whole", f"compile_mode={args.mode}", *args.runtime])
    except InputError as exc:
        parser.error(str(exc))
    if args.one:
        print(json.dumps(one(args)), flush=True)
        return
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    if not ways or any(w not in ("plain", "precompile") for w in ways):
        parser.error(f"--ways {args.ways}: expected plain and/or precompile, comma-separated")
    results: dict[tuple[str, str], dict] = {}
    child = [sys.executable, __file__, "--device", args.device, "--mode", args.mode, "--batch", str(args.batch),
             "--steps", str(args.steps), "--config", args.config, *[f"--runtime={p}" for p in args.runtime]]
    shared = tempfile.TemporaryDirectory(prefix="bench-precompile-") if args.share_cache else None
    for way in ways:
        with (contextlib.nullcontext(shared.name) if shared else
              tempfile.TemporaryDirectory(prefix=f"bench-precompile-{way}-")) as cache:
            for n, label in enumerate(("cold", "warm")):
                if shared and n == 0 and way != ways[0]:
                    label = "cold*"   # its own file compiled, Inductor's and AOTAutograd's caches already warm
                print(f"{way}, {label}: running", file=sys.stderr, flush=True)
                done = subprocess.run([*child, "--one", way], capture_output=True, text=True,
                                      env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache})
                lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
                result = json.loads(lines[-1]) if lines else {"error": done.stderr.strip()[-500:]}
                results[way, label] = result
                print(f"{way:10} {label:5} {json.dumps(result)}", flush=True)   # the losses too: calls compare
    if shared:
        shared.cleanup()
    plain, pre = results.get(("plain", "warm"), {}), results.get(("precompile", "warm"), {})
    if "first_step_s" in plain and "first_step_s" in pre:
        print(f"precompile / plain, warm first step: {pre['first_step_s'] / plain['first_step_s']:.3f} "
              f"({pre['first_step_s']:.2f} s against {plain['first_step_s']:.2f} s)")
        print(f"precompile / plain, steady step: {pre['steady_step_s'] / plain['steady_step_s']:.3f}")
        worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(pre["losses"], plain["losses"]))
        print(f"losses, the largest relative difference between the ways: {worst:.2e}")


if __name__ == "__main__":
    main()
