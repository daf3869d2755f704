"""The SDXL fine-tune's data path against the synthetic path, side by side on this machine's GPUs.

Writes a latent dataset of random samples at the model's shapes (the content does not change the
cost), then alternates `runner profile` runs of sdxl-unet without and with `--option data=DIR`
(round 1 synthetic first, round 2 data first, ...) at one GPU count and batch, and prints each
run's steady samples/s, peak GPU memory and the data/synthetic ratio per round. `--ema-batches`
then runs the data path with `ema=0.9999` at those per-GPU batches: its peak memory, or that it ran
out of memory.

`--read-only` measures how fast one thread reads the shards alone (no GPU needed).

Usage (on a GPU node): python scripts/bench_sdxl_data.py --data /tmp/latents --make 2048 --gpus 2 --batch 16 \\
    --steps 60 --rounds 2 --ema-batches 16,8 --root /tmp/bench
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make_dataset(folder: Path, samples: int, shard_size: int = 256) -> None:
    import torch
    from safetensors.torch import save_file

    from runner.workloads.latents import expected_shapes
    from runner.workloads.sdxl import load_config

    shapes = expected_shapes(load_config())
    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    for k, start in enumerate(range(0, samples, shard_size)):
        n = min(shard_size, samples - start)
        tensors = {name: torch.randn(n, *shape, generator=g).to(torch.bfloat16) for name, shape in shapes.items()}
        tensors["time_ids"] = torch.tensor([[1024.0, 1024.0, 0.0, 0.0, 1024.0, 1024.0]]).repeat(n, 1)
        save_file(tensors, str(folder / f"shard-{k:05d}.safetensors"))
    print(f"bench: wrote {samples} samples in {folder}", file=sys.stderr, flush=True)


def read_rate(folder: Path, batch: int, samples: int = 1024) -> float:
    """Samples/s that one thread reads from the shards in the training order (no GPU): the data path's
    ceiling, to set against what the GPUs consume."""
    import time

    from runner.workloads.latents import LatentShards, Order, expected_shapes
    from runner.workloads.sdxl import load_config

    shards = LatentShards(folder, expected_shapes(load_config()))
    order = Order(len(shards), 0, 0)
    started = time.perf_counter()
    for start in range(0, samples, batch):
        shards.read(order.rows(range(start, start + batch)))
    return samples / (time.perf_counter() - started)


def profile_run(root: Path, name: str, gpus: int, batch: int, steps: int, options: list[str],
                runtime: list[str]) -> dict:
    """One `runner profile` run; its report's figures, or {'failed': reason}."""
    from runner.report import measure

    run_root = root / name
    argv = [sys.executable, "-m", "runner", "profile", "--workload", "sdxl", "--gpus", str(gpus), "--batch", str(batch),
            "--steps", str(steps), "--gpu", "H200", "--out", str(root / f"{name}.yaml"), "--run-root", str(run_root)]
    argv += [a for o in options for a in ("--option", o)] + [a for r in runtime for a in ("--runtime", r)]
    print(f"bench: {name}: {' '.join(argv[3:])}", file=sys.stderr, flush=True)
    done = subprocess.run(argv, capture_output=True, text=True)
    (root / f"{name}.log").write_text(done.stdout + done.stderr)
    folder = run_root / f"gpus{gpus}-batch{batch}"
    if done.returncode != 0:
        reason = "out of memory" if "out of memory" in done.stderr else f"exit {done.returncode}"
        return {"failed": reason, "log": str(root / f"{name}.log")}
    figures = measure(folder)
    end = figures["end_of_run"]
    return {"samples_per_s": figures["samples_per_s"], "step_time_s": figures["step_time_s"],
            "steps_measured": figures["steps_measured"], "peak_allocated_gb": end.get("peak_allocated_gb"),
            "peak_reserved_gb": end.get("peak_reserved_gb")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--make", type=int, help="write this many random samples into --data first")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--first-round", type=int, default=1, help="odd: synthetic first, even: data first")
    parser.add_argument("--ema-batches", default="", help="per-GPU batches to run the data path with EMA at, e.g. 16,8")
    parser.add_argument("--runtime", action="append", default=[], help="KEY=VALUE over the profile's runner settings")
    parser.add_argument("--read-only", action="store_true", help="only measure how fast one thread reads the shards")
    parser.add_argument("--root", type=Path, default=Path("/tmp/bench-sdxl-data"))
    args = parser.parse_args()
    if args.make:
        make_dataset(args.data, args.make)
    if args.read_only:
        rates = [read_rate(args.data, args.batch) for _ in range(2)]
        print(f"one thread reads {rates[0]:.0f} then {rates[1]:.0f} samples/s ({args.batch} per read, random order)")
        return
    args.root.mkdir(parents=True, exist_ok=True)
    results = []
    for round_ in range(args.first_round, args.first_round + args.rounds):
        order = ("synthetic", "data") if round_ % 2 else ("data", "synthetic")
        measured = {}
        for path in order:
            options = [f"data={args.data}"] if path == "data" else []
            measured[path] = profile_run(args.root, f"{path}-{round_}", args.gpus, args.batch, args.steps, options,
                                         args.runtime)
        ratio = (measured["data"]["samples_per_s"] / measured["synthetic"]["samples_per_s"]
                 if all("samples_per_s" in measured[p] for p in measured) else None)
        results.append({"round": round_, "order": order, **measured, "data_over_synthetic": ratio})
        print(json.dumps(results[-1]), flush=True)
    for batch in [int(b) for b in args.ema_batches.split(",") if b]:
        ema = profile_run(args.root, f"data-ema-batch{batch}", args.gpus, batch, args.steps // 2,
                          [f"data={args.data}", "ema=0.9999"], args.runtime)
        results.append({"ema_batch_per_gpu": batch, **ema})
        print(json.dumps(results[-1]), flush=True)
    (args.root / "results.json").write_text(json.dumps(results, indent=2))
    ratios = [r["data_over_synthetic"] for r in results if r.get("data_over_synthetic")]
    if ratios:
        print(f"data/synthetic samples/s per round: {', '.join(f'{r:.3f}' for r in ratios)}; "
              f"mean {sum(ratios) / len(ratios):.3f}")


if __name__ == "__main__":
    main()
