"""GPU types from device names: what a process trained on ("NVIDIA H100 80GB HBM3", as the driver names it) as
the type a profile and a plan name (H100). Light: the runner imports it (no torch, no catalog)."""

from __future__ import annotations

import re
from collections.abc import Iterable


def gpu_type(device: str | None, known: Iterable[str]) -> str | None:
    """The GPU type among `known` (a profile's names: H100, A100-80GB, cpu) that a device's name says ("NVIDIA
    A100-SXM4-80GB" is A100-80GB: every dash-separated part of the type is a word of the name); the most specific
    where several do; None for no name, or one that names none of them (a GH200 is no H200)."""
    if not device:
        return None
    words = {w.casefold() for w in re.split(r"[^A-Za-z0-9]+", device) if w}
    said = [k for k in known if all(part.casefold() in words for part in k.split("-"))]
    return max(sorted(said), key=lambda k: len(k.split("-")), default=None)


def plan_gpu_mismatch(plan_gpu: str, device: str) -> str | None:
    """A warning when a process trains on a GPU other than the one its plan priced (the H200 plan on an H100: its
    micro-batch may not fit, and its speed is not the plan's); None when the device's name says the plan's GPU."""
    if gpu_type(device, (plan_gpu,)) is not None:
        return None
    return (f"the plan priced {plan_gpu} GPUs and this one is {device}: its speed and memory are not what the plan "
            "assumed (its micro-batch may not fit); `costsim plan --gpu TYPE` plans for this GPU, and `costsim "
            "calibrate` refits this GPU's figures from the run")
