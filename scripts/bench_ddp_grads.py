"""DDP's gradients dropped every step against zeroed in place (runner.train.clear_grads), and in place with DDP's
buckets made at the wrap (runner.speed.buckets_now, what compile=model ddp_graph=whole does), side by side: the peak
memory of a process that trains a model in DDP (gloo, one process, on the CPU), micro-batches accumulated under
no_sync as the runner does. Dropped, each step's first backward allocates the gradients beside DDP's buckets;
in place, they stay views of the buckets; at the wrap, DDP's second step no longer copies them from its first step's
one bucket into the sized ones (both held at once). Each round runs every way, each in a fresh process (its peak
resident memory, ru_maxrss), the order turning round by round; prints the medians, each difference against the
gradients' size, and the ratios.

Usage: python3 scripts/bench_ddp_grads.py [--params-m 100] [--layers 8] [--rounds 3] [--steps 3] [--optimizer adamw|sgd]
"""

from __future__ import annotations

import argparse
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
from runner.train import clear_grads
way, width, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
adamw, layers = sys.argv[6] == "adamw", int(sys.argv[7])
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="file://" + sys.argv[5], rank=0, world_size=1)
blocks = [m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.Tanh())]
model = DistributedDataParallel(torch.nn.Sequential(*blocks), gradient_as_bucket_view=True)
if way == "at-wrap":
    speed.configure_ddp(model, Runtime(compile="model", ddp_graph="whole"))   # compiles nothing: the buckets only
optimizer = (torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False) if adamw   # the runner's (fused on a GPU)
             else torch.optim.SGD(model.parameters(), lr=1e-3))   # no state
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


def peak(way: str, width: int, steps: int, scratch: Path, optimizer: str, layers: int) -> int:
    store = scratch / f"store-{way}"
    store.unlink(missing_ok=True)
    argv = [way, str(width), str(steps), str(ROOT), str(store), optimizer, str(layers)]
    out = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, check=True, timeout=600)
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
                             "the first step's; sgd: no state, so the first step, gradients beside the buckets either "
                             "way, sets a floor")
    args = parser.parse_args()
    width = int((args.params_m * 1e6 / args.layers) ** 0.5)
    grads = args.layers * (width * width + width) * 4
    with tempfile.TemporaryDirectory() as tmp:
        ways = ("dropped", "in-place", "at-wrap")
        found: dict[str, list[int]] = {way: [] for way in ways}
        for r in range(args.rounds):
            for way in ways[r % 3:] + ways[:r % 3]:
                found[way].append(peak(way, width, args.steps, Path(tmp), args.optimizer,
                                       args.layers))
                print(f"round {r + 1} {way:<9} peak {found[way][-1] / 1e6:8.1f} MB", file=sys.stderr, flush=True)
    dropped, in_place, at_wrap = (statistics.median(found[way]) for way in ("dropped", "in-place", "at-wrap"))
    print(f"{args.optimizer}, {args.layers} x {width * width / 1e6:.1f}M parameters, gradients {grads / 1e6:.1f} MB; "
          f"peak resident memory, medians of {args.rounds}: dropped {dropped / 1e6:.1f} MB, "
          f"in place {in_place / 1e6:.1f} MB, in place with the buckets made at the wrap {at_wrap / 1e6:.1f} MB; "
          f"dropped - in place {(dropped - in_place) / 1e6:.1f} MB ({(dropped - in_place) / grads:.2f} of the "
          f"gradients), in place - at the wrap {(in_place - at_wrap) / 1e6:.1f} MB "
          f"({(in_place - at_wrap) / grads:.2f}); in place / dropped {in_place / dropped:.3f}, "
          f"at the wrap / in place {at_wrap / in_place:.3f}")


if __name__ == "__main__":
    main()
