"""On the GPU machine: what a worker's start pays to bring CUDA up, and whether bringing it up on a thread
beside the imports hides it.

Each round starts fresh interpreters, alternating two ways:
  plain  import torch, import diffusers' UNet2DConditionModel, then the first CUDA tensor (torch's lazy init:
         the driver's cuInit and the device's primary context);
  early  the same, with a thread started first that calls the driver itself through ctypes (cuInit,
         cuDevicePrimaryCtxRetain: ctypes leaves the interpreter lock while they run), so that torch's init
         finds the context made.
Prints each process's phases and, per way, the medians; the ratio early/plain of the time to the first CUDA
tensor. (scripts/gpu_sdxl_build_probe.py's "CUDA context" line timed an already initialised CUDA.)

Usage: python3 scripts/gpu_cuda_init_probe.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import ctypes, json, sys, threading, time
started = time.perf_counter()
early = sys.argv[1] == "early"
thread_s = {}
def bring_up():
    t = time.perf_counter()
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    device, context = ctypes.c_int(), ctypes.c_void_p()
    assert cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
    thread_s["driver"] = time.perf_counter() - t
if early:
    helper = threading.Thread(target=bring_up, daemon=True)
    helper.start()
import torch
imported = time.perf_counter()
from diffusers import UNet2DConditionModel  # noqa: F401
diffused = time.perf_counter()
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
ready = time.perf_counter()
if early:
    helper.join()
print(json.dumps({"way": sys.argv[1], "import_torch": imported - started, "import_diffusers": diffused - imported,
                  "first_cuda_tensor": ready - diffused, "total": ready - started, **thread_s}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows: dict[str, list[dict]] = {"plain": [], "early": []}
    for round_ in range(args.rounds):
        for way in ("plain", "early"):
            out = subprocess.run([sys.executable, "-c", CHILD, way], capture_output=True, text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows[way].append(row)
            print(f"round {round_ + 1} {way:<5} " + "  ".join(f"{k} {v:.2f} s" for k, v in row.items() if k != "way"),
                  flush=True)
    for way, found in rows.items():
        print(f"{way:<5} medians: " + "  ".join(f"{k} {statistics.median(r[k] for r in found):.2f} s"
                                                for k in found[0] if k != "way"))
    plain = statistics.median(r["first_cuda_tensor"] for r in rows["plain"])
    early = statistics.median(r["first_cuda_tensor"] for r in rows["early"])
    total = statistics.median(r["total"] for r in rows["early"]) / statistics.median(r["total"] for r in rows["plain"])
    print(f"first CUDA tensor after the imports: early/plain {early / plain:.2f}x; whole: early/plain {total:.2f}x")


if __name__ == "__main__":
    main()
