"""On the GPU machine: where an SDXL start's 11-13 s of `build` goes, and what building on the meta
device would save (issue #36: "build on the meta device and let the load materialise the model").

Times, in one process, after `import diffusers` (timed too): the UNet built as the runner builds it
(random initialisation on the GPU), built on the meta device and materialised empty on the GPU
(to_empty: what a resume needs, the checkpoint load writing every parameter), the fused AdamW's
creation, and a second build of each (warm allocator and caches). Prints one line per phase.
Usage: PYTHONPATH=... python3 scripts/gpu_sdxl_build_probe.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path


def timed(label: str, fn):
    import torch
    torch.cuda.synchronize()
    started = time.perf_counter()
    value = fn()
    torch.cuda.synchronize()
    print(f"{label:<44} {time.perf_counter() - started:7.2f} s", flush=True)
    return value


def main() -> None:
    started = time.perf_counter()
    import torch
    print(f"{'import torch':<44} {time.perf_counter() - started:7.2f} s", flush=True)
    started = time.perf_counter()
    from diffusers import UNet2DConditionModel  # noqa: F401 - timed: what a start pays to import it
    print(f"{'import diffusers (UNet2DConditionModel)':<44} {time.perf_counter() - started:7.2f} s", flush=True)
    config = json.loads((Path(__file__).parent.parent / "data" / "models" / "sdxl_unet_config.json").read_text())
    device = torch.device("cuda")
    timed("CUDA context", lambda: torch.zeros(1, device=device))
    for round_ in (1, 2):
        probe(round_, config, device)


def probe(round_: int, config: dict, device) -> None:
    import torch
    from diffusers import UNet2DConditionModel  # noqa: F401 - timed: what a start pays to import it

    def on_gpu():
        with device:
            return UNet2DConditionModel.from_config(config)

    def on_meta():
        with torch.device("meta"):
            return UNet2DConditionModel.from_config(config)
    built = timed(f"[{round_}] build on the GPU (random init)", on_gpu)
    del built
    torch.cuda.empty_cache()
    meta = timed(f"[{round_}] build on the meta device", on_meta)
    model = timed(f"[{round_}] to_empty on the GPU", lambda: meta.to_empty(device=device))
    timed(f"[{round_}] fused AdamW", lambda: torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True))
    torch.cuda.empty_cache()

if __name__ == "__main__":
    main()
