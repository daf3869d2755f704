#!/usr/bin/env python3
"""What a compile=model start spends tracing the SDXL UNet, whole and with its transformer blocks as nested
compile regions (torch.compiler.nested_compile_region: Dynamo traces a repeated block once and reuses its graph).

A resume under `compile=model` with CUDA graphs spends 16.4 s of its first step in Dynamo on an H100, tracing the
whole model again although every Inductor and AOTAutograd cache answered (data/measurements/
2026-12-07-h100-graphs-resume-load). SDXL's UNet repeats one transformer block 70 times; a region would trace it
once. Each way runs in a process of its own, with the model built from the shipped UNet config at a narrow width
(the same blocks and calls; tracing does not depend on the width), compiled with `--backend` (aot_eager: Dynamo
and AOTAutograd, what a warm start does before its caches answer; inductor: the whole compile, into a fresh cache
folder per way, then again from it), one forward and backward, its output against the eager model's:

    python3 scripts/bench_compile_regions.py [--backend aot_eager|inductor] [--device cuda] [--one whole|regions]
        [--head-size 8|64]

Measured on the 2-core CPU machine, torch 2.13.0+cpu, diffusers 0.42.1 (2026-12-07): aot_eager, the first call
45.9 s whole against 33.2 s with regions (0.72x; 54.9 against 37.7 s in an earlier run; Dynamo's captured calls
3,625 against 545), the same output; inductor, whole 338.3 s cold and 18.0 s from its cache, and with regions
Inductor fails ("Cannot view a tensor with shape [2, 64, 10, 8] and strides (5120, 80, 1, 10) as a tensor with
shape (2, 64, 80)": the attention's heads merged back, with strides the region's compiled graph chose); at SDXL's
head size (`--one regions --backend inductor --head-size 64`: channels 128/256/512) it fails the same way, shape
[2, 64, 4, 64]. Strides across the region's boundary are a known gap of torch's invoke_subgraph
(pytorch/pytorch#152806, #181809). Not a runner setting.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# the UNet's config at a narrow width, per head size: SDXL's heads (5, 10, 20 a level) at 8 channels each, or
# fewer heads at SDXL's own 64 channels each
WIDTHS = {8: {"block_out_channels": [40, 80, 160], "norm_num_groups": 8},
          64: {"block_out_channels": [128, 256, 512], "attention_head_dim": [2, 4, 8]}}


def narrow_config(head_size: int = 8) -> dict:
    """SDXL's UNet config at a narrow width (WIDTHS): the same blocks, depth and calls, so the same tracing work."""
    config = json.loads((ROOT / "data" / "models" / "sdxl_unet_config.json").read_text())
    config.update(WIDTHS[head_size], cross_attention_dim=64, addition_time_embed_dim=16,
                  projection_class_embeddings_input_dim=64 + 6 * 16, sample_size=16)
    return config


def one(way: str, backend: str, device: str, head_size: int) -> None:
    """In this process: build, compile `way`, call once; print one JSON line."""
    import torch
    from diffusers import UNet2DConditionModel
    from diffusers.models.attention import BasicTransformerBlock

    config = narrow_config(head_size)
    if way == "regions":
        BasicTransformerBlock.forward = torch.compiler.nested_compile_region(BasicTransformerBlock.forward)
    torch.manual_seed(0)
    model = UNet2DConditionModel.from_config(config).to(device)
    inputs = (torch.randn(2, 4, 16, 16, device=device), torch.tensor([10, 500], device=device))
    kwargs = {"encoder_hidden_states": torch.randn(2, 8, 64, device=device),
              "added_cond_kwargs": {"text_embeds": torch.randn(2, 64, device=device),
                                    "time_ids": torch.randn(2, 6, device=device)}}
    expected = model(*inputs, **kwargs).sample
    compiled = torch.compile(model, backend=backend)
    started = time.perf_counter()
    try:
        out = compiled(*inputs, **kwargs).sample
        out.float().pow(2).mean().backward()
    except Exception as e:   # a compiler's failure is this way's result
        first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)   # not torch's hints
        print(json.dumps({"way": way, "error": f"{type(e).__name__}: {first.strip()[:300]}"}))
        return
    from torch._dynamo.utils import counters
    print(json.dumps({"way": way, "first_call_s": time.perf_counter() - started,
                      "calls_captured": counters["stats"]["calls_captured"],
                      "max_abs_diff": (out - expected).abs().max().item()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["aot_eager", "inductor"], default="aot_eager")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU machine")
    parser.add_argument("--one", choices=["whole", "regions"], help="this way alone, in this process")
    parser.add_argument("--head-size", type=int, choices=sorted(WIDTHS), default=8,
                        help="channels an attention head (64: SDXL's own, at fewer heads)")
    args = parser.parse_args()
    if args.one:
        one(args.one, args.backend, args.device, args.head_size)
        return
    results = {}
    rounds = ["cold", "warm"] if args.backend == "inductor" else ["cold"]
    for way in ["whole", "regions"]:
        with tempfile.TemporaryDirectory() as cache:
            for label in rounds:
                print(f"{way}, {label}: running", file=sys.stderr, flush=True)
                done = subprocess.run([sys.executable, __file__, "--one", way, "--backend", args.backend,
                                       "--device", args.device, "--head-size", str(args.head_size)],
                                      capture_output=True, text=True, env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache})
                lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
                results[way, label] = json.loads(lines[-1]) if lines else {"error": done.stderr.strip()[-300:]}
                print(f"{way:8} {label:5} {json.dumps(results[way, label])}")
    whole, regions = results["whole", "cold"], results["regions", "cold"]
    if "first_call_s" in whole and "first_call_s" in regions:
        print(f"regions / whole, the first call: {regions['first_call_s'] / whole['first_call_s']:.3f}")


if __name__ == "__main__":
    main()
