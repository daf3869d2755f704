"""How many CUDA devices a process on this node will see, without torch: `runner execute` needs the count
before torchrun starts, and importing torch to ask CUDA (1.2-1.6 s on the H200 host, the driver's start
included) sat on every life's path. Where only CUDA itself can tell, the answer is None and the caller
asks torch."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping

DRIVER = Path("/proc/driver/nvidia")


def visible_gpus(env: Mapping[str, str] = os.environ, driver: Path = DRIVER) -> int | None:
    """The NVIDIA driver's GPUs (one folder each in /proc/driver/nvidia/gpus) as CUDA_VISIBLE_DEVICES narrows
    them, read as torch.cuda reads it (its _parse_visible_devices and NVML count). None where CUDA alone
    knows: no NVIDIA driver here, devices named by UUID, or MIG instances (a process sees one of them, not GPUs)."""
    try:
        physical = sum(1 for _ in (driver / "gpus").iterdir())
        mig = any((driver / "capabilities").glob("gpu*/mig/gi*"))
    except OSError:
        return None
    if mig:
        return None
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return physical
    if visible.startswith(("GPU-", "MIG-")):
        return None
    seen: list[int] = []
    for entry in visible.split(","):   # as CUDA reads it (strtoul: "1gpu2" is 1), and torch.cuda after it
        digits = re.match(r"\s*[+-]?\d+", entry)
        index = int(digits.group()) if digits else -1
        if index < 0:   # a negative or unreadable entry ends the list
            break
        if index in seen:   # a repeated one empties it
            return 0
        seen.append(index)
    return next((i for i, index in enumerate(seen) if index >= physical), len(seen))   # up to one that is not there


def gpu_count(env: Mapping[str, str] = os.environ) -> int:
    """visible_gpus, else CUDA's own count through torch."""
    count = visible_gpus(env)
    if count is not None:
        return count
    import torch
    return torch.cuda.device_count()
