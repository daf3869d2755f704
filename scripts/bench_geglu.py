#!/usr/bin/env python3
"""SDXL's feed-forward (diffusers' GEGLU and its output projection), forward and backward, compiled, two ways.

The whole-model profile (data/measurements/2026-12-05-h200-kernels) found the GEGLU's backward the largest of
Inductor's kernels: `triton_poi_fused_cat_gelu_gelu_backward_mul_split_view`, 0.63 ms a launch where the bytes it
moves take about 0.2 ms. diffusers' GEGLU projects to twice the width and splits the result in two (`chunk`), so
the backward concatenates the two halves' gradients, and Inductor computes that concatenation in one kernel that
evaluates the gelu and its derivative for every element. The ways, each compiled afresh, side by side in one run
(medians of CUDA-event times, alternating):

  default   diffusers' GEGLU as it is
  split     the projection as two linear layers on the weight's halves (runtime geglu=split: the same
            parameters, no concatenation in the backward)

Measured on an H200 (data/measurements/2026-12-06-h200-geglu-split): split 0.865x the default's time at 640
channels and 0.940x at 1,280, its gelu backward 2.8-2.9x faster; Inductor's pointwise-cat limits at 1 (a third way
then, `pointwise_cat=false`) left the kernel as it was. Every way's output and gradients are compared with the eager
module's, each way is checked to have compiled a graph of its own (Dynamo reuses one module's graph for another of
its class where its guards allow), and the largest kernels of one step each are listed (torch.profiler). On the
device (bf16 autocast, SDXL's shapes at --batch):
    python3 scripts/bench_geglu.py --batch 16 [--out FILE.json]
On CPU it checks the ways agree (tiny shapes):
    python3 scripts/bench_geglu.py --tiny
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner import speed  # noqa: E402

WAYS = ("default", "split")
# SDXL at 1024 px (128 x 128 latents): its transformer blocks run at 64 x 64 tokens, 640 channels (4 blocks), and
# at 32 x 32, 1,280 channels (66 blocks, 60 of them in the profile's step)
SHAPES = {"640": (4096, 640), "1280": (1024, 1280)}


def feed_forward(dim: int, way: str, device) -> torch.nn.Module:
    from diffusers.models.attention import FeedForward
    torch.manual_seed(0)
    ff = FeedForward(dim, dim_out=dim, activation_fn="geglu").to(device)
    if way == "split":
        speed.split_geglu(ff)
    return ff


def _step(module, x, dtype):
    with torch.autocast(x.device.type, dtype=dtype):
        out = module(x)
    out.float().square().mean().backward()
    return out


def compiled_ways(dim: int, x, dtype) -> tuple[dict[str, torch.nn.Module], dict[str, int]]:
    """Each way compiled and warmed up, and how many graphs each compiled (a way that compiled none would be
    running another's graph)."""
    from torch._dynamo.utils import counters
    modules, graphs = {}, {}
    for way in WAYS:
        modules[way] = feed_forward(dim, way, x.device)
        modules[way].compile()
        before = counters["stats"]["unique_graphs"]
        for _ in range(3):
            _step(modules[way], x, dtype)
        graphs[way] = counters["stats"]["unique_graphs"] - before
    return modules, graphs


def check(modules, dim: int, x0, dtype) -> dict[str, dict[str, float]]:
    """Each compiled way's output and gradients against the eager module's (bf16 rounds differently from Inductor's
    fp32 intermediates) and against the default way's: the largest difference relative to the largest magnitude."""
    def run(module):
        module.zero_grad()
        x = x0.clone().requires_grad_()
        out = _step(module, x, dtype)
        return [out.detach(), x.grad, *(p.grad for p in module.parameters())]

    def worst(got, want) -> float:
        return max(float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-12))
                   for a, b in zip(got, want))

    eager = run(feed_forward(dim, "default", x0.device))
    results = {way: run(module) for way, module in modules.items()}
    return {way: {"eager": worst(got, eager), "default": worst(got, results["default"])}
            for way, got in results.items()}


def timed(modules, x, dtype, repeats: int, steps: int) -> dict[str, list[float]]:
    """ms a forward and backward, each way `repeats` times in turn (alternating, so drift falls on all alike)."""
    times: dict[str, list[float]] = {way: [] for way in modules}
    for _ in range(repeats):
        for way, module in modules.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(steps):
                _step(module, x, dtype)
            end.record()
            torch.cuda.synchronize()
            times[way].append(start.elapsed_time(end) / steps)
    return times


def top_kernels(module, x, dtype, top: int = 6) -> list[tuple[str, float, int]]:
    """The largest GPU kernels of one forward and backward: (name, us, launches)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        _step(module, x, dtype)
        torch.cuda.synchronize()
    rows = [(e.key, e.self_device_time_total, e.count) for e in prof.key_averages() if e.self_device_time_total > 0]
    return sorted(rows, key=lambda r: -r[1])[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tiny", action="store_true", help="small shapes, agreement only (CPU)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.tiny
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16
    shapes = {"tiny": (16, 64)} if not cuda else SHAPES
    result: dict = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if cuda else "cpu",
                    "batch": args.batch, "shapes": {}}
    for name, (tokens, dim) in shapes.items():
        batch = args.batch if cuda else 1
        rows = batch * tokens
        torch.manual_seed(1)
        x = torch.randn(batch, tokens, dim, device=device, requires_grad=True)   # as the blocks see it
        modules, graphs = compiled_ways(dim, x, dtype)
        entry: dict = {"dim": dim, "rows": rows, "graphs": graphs, "difference": check(modules, dim, x.detach(), dtype)}
        print(f"{name}: {rows} rows x {dim}; largest difference, relative, from eager / from the default way: "
              + ", ".join(f"{w} {e['eager']:.2e} / {e['default']:.2e}" for w, e in entry["difference"].items())
              + "; graphs compiled: " + ", ".join(f"{w} {n}" for w, n in graphs.items()), flush=True)
        if cuda:
            times = timed(modules, x, dtype, args.repeats, args.steps)
            entry["ms"] = times
            medians = {w: statistics.median(t) for w, t in times.items()}
            print("  ms a forward + backward (median of {}): ".format(args.repeats)
                  + ", ".join(f"{w} {m:.3f} ({m / medians['default']:.3f}x)" for w, m in medians.items()), flush=True)
            entry["kernels"] = {}
            for way, module in modules.items():
                kernels = top_kernels(module, x, dtype)
                entry["kernels"][way] = kernels
                print(f"  {way}: " + "; ".join(f"{k[:60]} {us / 1000:.3f} ms x{n}" for k, us, n in kernels), flush=True)
        result["shapes"][name] = entry
        torch._dynamo.reset()
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
