"""Benchmark what a worker's exit costs after a notice's save: the time from its last act (`os._exit`) to
its parent seeing it gone, with what a training process holds at that moment, side by side in one run.

A worker that leaves for a notice calls `os._exit` once its checkpoint is durable; the kernel then frees
its memory (the host staging buffers: 30.8 GB for SDXL's training state) and the driver its GPU context,
before the parent's wait returns. Each variant runs in a fresh child process, alternating, `--rounds`
times:

  bare        import torch, nothing allocated
  host        + `--host-gb` of pageable host memory in tensors of about `--tensor-mb`, zeroed (the
                runner's staging buffers before: torch.zeros per state tensor)
  host-huge   + the same from `runner.staging.host_buffers`: views of one mapping advised MADV_HUGEPAGE
                (2 MB pages), the runner's staging buffers now
  gpu         (CUDA only) a context and `--device-gb` allocated on the GPU
  gpu+host    (CUDA only) both: a training process at a notice

Prints each variant's median exit time and its ratio to `host` (or `gpu+host` on a GPU).

Usage (from the repository root): python scripts/bench_exit.py [--host-gb 4] [--device-gb 0] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

VARIANTS = ("bare", "host", "host-huge", "gpu", "gpu+host", "gpu+host-huge")
CHILD = r"""
import os, sys, time
sys.path.insert(0, os.getcwd())
import torch
variant, host_gb, device_gb, tensor_mb = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
keep = []
if "gpu" in variant:
    keep.append(torch.empty(int(device_gb * 2**30), dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()
if "host" in variant:
    from runner.staging import host_buffers
    total, each = int(host_gb * 2**30), int(tensor_mb * 2**20)
    shapes = [torch.empty(min(each, total - start), dtype=torch.uint8, device="meta") for start in range(0, total, each)]
    keep += host_buffers(shapes) if variant.endswith("huge") else [torch.zeros(s.shape, dtype=s.dtype) for s in shapes]
print(f"exit {time.time()!r}", flush=True)
os._exit(0)
"""


def one(variant: str, args) -> tuple[float, float]:
    """(seconds from the child's os._exit to the parent's wait returning, seconds the child took to get there)."""
    started = time.time()
    child = subprocess.Popen([sys.executable, "-c", CHILD, variant, str(args.host_gb), str(args.device_gb),
                              str(args.tensor_mb)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    line = child.stdout.readline()
    child.wait()
    ended = time.time()
    if child.returncode != 0 or not line.startswith("exit "):
        raise SystemExit(f"{variant}: the child failed (exit {child.returncode})")
    exit_t = float(line.split()[1])
    return ended - exit_t, exit_t - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host-gb", type=float, default=4.0, help="host staging memory (SDXL: 30.8 GB)")
    parser.add_argument("--device-gb", type=float, default=0.0, help="GPU memory held (0: no GPU variants)")
    parser.add_argument("--tensor-mb", type=float, default=4.6, help="size of each host tensor (SDXL: 30.8 GB "
                                                                      "in about 6,700 tensors)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", help="comma-separated, of " + ", ".join(VARIANTS) + " (default: all that apply)")
    args = parser.parse_args()
    variants = [v for v in VARIANTS if args.device_gb > 0 or "gpu" not in v]
    if args.variants:
        variants = args.variants.split(",")
        unknown = sorted(set(variants) - set(VARIANTS))
        if unknown:
            parser.error(f"--variants: no {', '.join(unknown)}; allowed: {', '.join(VARIANTS)}")
    try:
        thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip()
    except OSError:
        thp = "unknown"
    print(f"host {args.host_gb} GB in {args.tensor_mb} MB tensors, device {args.device_gb} GB, "
          f"transparent huge pages: {thp}")
    times: dict[str, list[float]] = {v: [] for v in variants}
    for round_ in range(args.rounds):
        for variant in variants:
            exit_s, setup_s = one(variant, args)
            times[variant].append(exit_s)
            print(f"round {round_ + 1} {variant:<14} exit {exit_s:6.3f} s   (set up in {setup_s:5.1f} s)", flush=True)
    base = next((v for v in ("gpu+host", "host") if v in variants), variants[0])
    reference = statistics.median(times[base])
    for variant in variants:
        median = statistics.median(times[variant])
        print(f"{variant:<14} median exit {median:6.3f} s   {median / reference:5.2f}x {base}")


if __name__ == "__main__":
    main()
