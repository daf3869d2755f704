"""DDP's gradients dropped every step against zeroed in place (runner.train.clear_grads), in place with DDP's
buckets made at the wrap (runner.speed.buckets_now, what compile=model ddp_graph=whole does), and that with the
gradients made before the wrap (runner.train.grads_for_buckets: what the runner does now), side by side: the peak
memory of a process that trains a model in DDP (gloo, one process, on the CPU), micro-batches accumulated under
no_sync as the runner does. Dropped, each step's first backward allocates the gradients beside DDP's buckets;
in place, they stay views of the buckets; at the wrap, DDP's second step no longer copies them from its first step's
one bucket into the sized ones (both held at once); made first, the first step's backward accumulates into the
buckets too (--resumed: the optimizer's state made before the first step, as a resumed life has it, where that
first step's gradients beside the buckets come on top of it). Each round runs every way, each in a fresh process
(its peak resident memory, ru_maxrss), the order turning round by round; prints the medians, and what each way
saves over the one before it, against the gradients' size and as a ratio.

Usage: python3 scripts/bench_ddp_grads.py [--params-m 100] [--layers 8] [--rounds 3] [--steps 3] [--optimizer adamw|sgd]
                                         [--resumed]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import resource, sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
sys.path.insert(0, sys.argv[4])
from costsim.runtime import Runtime
from runner import speed
from runner.state import make_optimizer_state
from runner.train import clear_grads, grads_for_buckets
way, width, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
adamw, layers, resumed = sys.argv[6] == "adamw", int(sys.argv[7]), sys.argv[8] == "resumed"
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="file://" + sys.argv[5], rank=0, world_size=1)
blocks = [m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.Tanh())]
bare = torch.nn.Sequential(*blocks)
optimizer = (torch.optim.AdamW(bare.parameters(), lr=1e-3, foreach=False) if adamw   # the runner's (fused on a GPU)
             else torch.optim.SGD(bare.parameters(), lr=1e-3))   # no state
if way == "made-first":
    grads_for_buckets(bare)
model = DistributedDataParallel(bare, gradient_as_bucket_view=True)
if way in ("at-wrap", "made-first"):
    speed.configure_ddp(model, Runtime(compile="model", ddp_graph="whole"))   # compiles nothing: the buckets only
if resumed:   # as a resumed life's restore makes it, after the wrap and before the first step
    make_optimizer_state(optimizer)
x = torch.randn(8, width)
for step in range(steps):
    clear_grads(optimizer, in_place=way != "dropped")
    for micro in range(2):
        with (model.no_sync() if micro == 0 else torch.enable_grad()):
            model(x).square().mean().backward()
    optimizer.step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
dist.destroy_process_group()
"""


def peak(way: str, width: int, steps: int, scratch: Path, optimizer: str, layers: int, resumed: bool) -> int:
    store = scratch / f"store-{way}"
    store.unlink(missing_ok=True)
    argv = [way, str(width), str(steps), str(ROOT), str(store), optimizer, str(layers), "resumed" if resumed else "new"]
    # glibc's MALLOC_PERTURB_ fills each allocation as it is made, so its pages are resident at once: a GPU's memory
    # is taken at its allocation, and without it memory that torch allocates empty (DDP's buckets, until the first
    # copy into them) would count only from its first write, hiding when it lies beside other memory.
    out = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, check=True, timeout=600,
                         env={**os.environ, "MALLOC_PERTURB_": "85"})
    return int(out.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params-m", type=float, default=100.0, help="the model's parameters, millions")
    parser.add_argument("--layers", type=int, default=8,
                        help="linear layers of equal size; in place, one layer's incoming gradient still exists beside "
                             "the buckets as it is added, so the saving is the gradients less one layer's")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw",
                        help="adamw: the runner's, whose state (made at the first step) puts the steady steps' peak above "
                             "the first step's; sgd: no state, so the first step, its gradients beside the buckets "
                             "unless they were made first, sets the peak")
    parser.add_argument("--resumed", action="store_true",
                        help="the optimizer's state made before the first step, as a resumed life's restore makes it")
    args = parser.parse_args()
    width = int((args.params_m * 1e6 / args.layers) ** 0.5)
    grads = args.layers * (width * width + width) * 4
    with tempfile.TemporaryDirectory() as tmp:
        ways = ("dropped", "in-place", "at-wrap", "made-first")
        found: dict[str, list[int]] = {way: [] for way in ways}
        for r in range(args.rounds):
            for way in ways[r % len(ways):] + ways[:r % len(ways)]:
                found[way].append(peak(way, width, args.steps, Path(tmp), args.optimizer, args.layers, args.resumed))
                print(f"round {r + 1} {way:<9} peak {found[way][-1] / 1e6:8.1f} MB", file=sys.stderr, flush=True)
    medians = {way: statistics.median(found[way]) for way in ways}
    print(f"{args.optimizer}, {args.layers} x {width * width / 1e6:.1f}M parameters, gradients {grads / 1e6:.1f} MB"
          f"{', the optimizer state made first (a resumed life)' if args.resumed else ''}; peak resident memory, "
          f"medians of {args.rounds}: " + ", ".join(f"{way} {medians[way] / 1e6:.1f} MB" for way in ways))
    for before, after in zip(ways, ways[1:]):
        saved = medians[before] - medians[after]
        print(f"  {before} -> {after}: {saved / 1e6:.1f} MB less ({saved / grads:.2f} of the gradients), "
              f"{after} / {before} {medians[after] / medians[before]:.3f}")


if __name__ == "__main__":
    main()
