"""A bare, hand-written DDP training loop (no checkpoints, no telemetry): the runner's yardstick.

Started by torchrun from scripts/bench_runner.py; prints one JSON line with its steady-state rate.
Uses the same workload builder as the runner, so only the loop differs.
"""

import argparse
import json
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from runner.batching import split_batch
from runner.workloads import BuildContext, resolve


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--model", default="tiny")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ctx = BuildContext(rank=rank, world_size=world, device=torch.device("cpu"), micro_batch=args.global_batch // world,
                       accumulation=1, seed=0, precision="fp32")
    split = split_batch(args.global_batch, world, args.global_batch // world)
    built = resolve(args.model)(ctx)
    model = DistributedDataParallel(built.model, gradient_as_bucket_view=True)
    for step in range(args.steps):
        if step == args.warmup:
            started = time.perf_counter()
        built.optimizer.zero_grad(set_to_none=True)
        built.loss(model, built.batch(split.indices(step, rank, 0))).backward()
        built.optimizer.step()
        if built.scheduler is not None:
            built.scheduler.step()
    elapsed = time.perf_counter() - started
    if rank == 0:
        measured = args.steps - args.warmup
        print(json.dumps({"steps": measured, "seconds": elapsed, "samples_per_s": measured * args.global_batch / elapsed}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
