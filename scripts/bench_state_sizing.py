"""Making the state a resume's checkpoint loads into, torch's way against runner.state's, side by side.

A resumed process's optimizer has no state; the checkpoint's read needs every entry of it in place. torch's
get_state_dict makes it with one zero-learning-rate step on zero gradients over every parameter;
runner.state.make_optimizer_state makes each entry directly from one step on a small probe. Rounds alternate the
two, each on a fresh AdamW over the same SDXL UNet (the workload's: fused on a GPU, foreach on a CPU), timed to
the end of get_state_dict (the device synchronised; on a GPU the allocator's cache emptied first, as in a new
process). Prints each way's median and the ratio.

Usage: python3 scripts/bench_state_sizing.py [--device cpu|cuda] [--narrow N] [--rounds 5]
  --narrow: divide the UNet's widths by N (default 10 on a CPU, 1 on a GPU: the real 2.57B parameters)
(needs the sdxl extra: diffusers; on the device machine, after the carried wheels, `tar xzf .whl/botocore-s3.tgz -C
/tmp/site` too: diffusers' imports there reach botocore)
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import torch  # noqa: E402
from bench_restore_parts import narrow_config  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_state_dict  # noqa: E402

from runner.state import make_optimizer_state  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--narrow", type=int, default=None, help="divide the UNet's widths by this")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    narrow = args.narrow if args.narrow is not None else (1 if args.device == "cuda" else 10)
    if narrow < 1 or args.rounds < 1:
        parser.error("--narrow and --rounds: whole numbers >= 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this machine has no CUDA device")
    from diffusers import UNet2DConditionModel
    device = torch.device(args.device)
    with device:
        model = UNet2DConditionModel.from_config(narrow_config(narrow))
    params = list(model.parameters())
    print(f"{len(params)} parameters, {sum(p.numel() for p in params) / 1e9:.3f} B values on {device}", file=sys.stderr)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    times: dict[str, list[float]] = {"torch's step": [], "probed": []}
    for round_ in range(args.rounds):
        for way in times:
            optimizer = torch.optim.AdamW(params, lr=1e-4, weight_decay=1e-2, fused=device.type == "cuda" or None,
                                          foreach=device.type != "cuda" or None)
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            sync()
            began = time.perf_counter()
            if way == "probed":
                how = make_optimizer_state(optimizer)
                assert how == "probed", how
            get_state_dict(model, optimizer)
            sync()
            times[way].append(time.perf_counter() - began)
            print(f"round {round_ + 1} {way}: {times[way][-1]:.3f} s", file=sys.stderr)
            del optimizer
    print(f"{len(params)} parameters on {device} (narrow {narrow}), torch {torch.__version__}, medians of "
          f"{args.rounds} rounds:")
    for way, values in times.items():
        print(f"  {way:<14} {statistics.median(values):6.3f} s  ({min(values):.3f}-{max(values):.3f})")
    probed, stepped = (statistics.median(times[way]) for way in ("probed", "torch's step"))
    print(f"  probed / torch's step: {probed / stepped:.2f}x")


if __name__ == "__main__":
    main()
