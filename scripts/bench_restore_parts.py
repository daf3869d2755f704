"""A resume's restore before the warm step starts, part by part, on the SDXL UNet's structure with narrow layers:
its 1,680 parameters and their AdamW state (6,700 checkpoint records) at a fraction of the bytes, so that the
interpreter's share of each part shows on any machine.

Parts, as the runner has them (runner.train.Trainer.restore): sizing the training state (`training_state`:
torch's get_state_dict makes the optimizer's state with a zero-learning-rate step on zero gradients), then the
checkpoint read (runner.checkpoint_reader): its planning (the metadata and DCP's plans, `planned_s`) and, on the
batched path, the per-record part (`prepare_s`) after which the warm step starts; then the rest of the read.
Rounds alternate the read's ways (COSTSIM_READ_BATCHED=never and always); the sizing is timed once per round in a
fresh optimizer (a resumed process has none).

Usage: python3 scripts/bench_restore_parts.py [--narrow 10] [--rounds 3] [--dir /dev/shm/bench-restore]
(needs the sdxl extra: diffusers)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint import FileSystemWriter  # noqa: E402

from runner import checkpoint_reader  # noqa: E402
from runner.state import training_state  # noqa: E402


def narrow_config(factor: int) -> dict:
    """data/models/sdxl_unet_config.json with every width divided by `factor` (heads kept at 32 channels each, the
    norms' 32 groups dividing every width): the same modules and parameters, fewer bytes."""
    config = json.loads((ROOT / "data" / "models" / "sdxl_unet_config.json").read_text())
    widths = [max(32, w // factor // 32 * 32) for w in config["block_out_channels"]]
    time_dim = max(8, config["addition_time_embed_dim"] // factor)
    text = max(32, config["cross_attention_dim"] // factor)
    config.update(block_out_channels=widths, attention_head_dim=[w // 32 for w in widths], cross_attention_dim=text,
                  addition_time_embed_dim=time_dim, projection_class_embeddings_input_dim=text + 6 * time_dim)
    return config


def narrow_unet(factor: int):
    """The SDXL UNet of `narrow_config(factor)`, random weights."""
    from diffusers import UNet2DConditionModel
    return UNet2DConditionModel.from_config(narrow_config(factor))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--narrow", type=int, default=10, help="divide the UNet's widths by this")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("/dev/shm/bench-restore"))
    args = parser.parse_args()
    if args.narrow < 1 or args.rounds < 1:
        parser.error("--narrow and --rounds: whole numbers >= 1")
    model = narrow_unet(args.narrow)
    params = list(model.parameters())
    print(f"{len(params)} parameters, {sum(p.numel() for p in params) / 1e6:.1f} M values", file=sys.stderr)
    saved = training_state(model, torch.optim.AdamW(params, lr=1e-4), None, 0, 0)
    shutil.rmtree(args.dir, ignore_errors=True)
    dcp.save(saved, storage_writer=FileSystemWriter(str(args.dir), thread_count=4), no_dist=True)
    times: dict[str, list[float]] = {}
    for round_ in range(args.rounds):
        for mode in ("never", "always"):
            for p in params:
                p.grad = None
            optimizer = torch.optim.AdamW(params, lr=1e-4)   # a resumed process's: no state yet
            began = time.perf_counter()
            state = training_state(model, optimizer, None, 0, 0)
            times.setdefault("sizing the state", []).append(time.perf_counter() - began)
            os.environ["COSTSIM_READ_BATCHED"] = mode
            reader = checkpoint_reader.SafeFileSystemReader(str(args.dir))
            began = time.perf_counter()
            dcp.load(state, storage_reader=reader, planner=checkpoint_reader.SafeLoadPlanner(), no_dist=True)
            read = time.perf_counter() - began
            times.setdefault(f"read ({mode})", []).append(read)
            times.setdefault(f"  planning ({mode})", []).append(reader.timings["planned_s"])
            if "prepare_s" in reader.timings:
                times.setdefault(f"  per-record part ({mode})", []).append(reader.timings["prepare_s"])
            print(f"round {round_ + 1} {mode}: read {read:.3f} s {reader.timings}", file=sys.stderr)
    print(f"{len(params)} parameters, torch {torch.__version__}, medians of {args.rounds} rounds:")
    for name, values in times.items():
        print(f"  {name:<34} {statistics.median(values):6.3f} s  ({min(values):.3f}-{max(values):.3f})")
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
