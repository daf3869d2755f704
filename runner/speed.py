"""Apply the runner's speed settings (costsim.runtime.Runtime) to a built workload.

Everything applies to the bare model before DDP wraps it. Compiling the bare model (not the DDP
module) keeps the graph whole: compiling the DDP module would make TorchDynamo's DDP optimizer
split it at every gradient bucket (about 400 pieces for SDXL's 10.3 GB of gradients at 25 MB),
slowing compilation and cutting fusion. The price: with compile=model the gradients of the whole
model appear at the end of its one compiled backward, so their all-reduce no longer overlaps the
backward pass (within a node a few tens of ms per step for SDXL); compile=blocks compiles each
repeated block, whose gradients appear block by block and overlap as in eager mode.
`nn.Module.compile` compiles in place, so state-dict keys, and with them checkpoints, are the same
with and without compilation.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch

from costsim.runtime import Runtime


class RuntimeConfigError(RuntimeError):
    """A setting this workload or device cannot honour: restarting cannot help."""


def check_device(runtime: Runtime, device: torch.device) -> None:
    if device.type != "cuda" and runtime.sdpa not in ("auto", "math"):
        raise RuntimeConfigError(f"runtime.sdpa={runtime.sdpa} needs a CUDA GPU; on CPU use auto or math")
    if device.type != "cuda" and runtime.compile_mode in ("reduce-overhead", "max-autotune"):
        raise RuntimeConfigError(f"runtime.compile_mode={runtime.compile_mode} uses CUDA graphs; on CPU use "
                                 "default or max-autotune-no-cudagraphs")


def prepare_model(model: torch.nn.Module, runtime: Runtime) -> int:
    """Settings applied to the bare model before DDP; returns the number of modules compiled."""
    if runtime.activation_checkpointing:
        enable = getattr(model, "enable_gradient_checkpointing", None)
        if enable is None:
            raise RuntimeConfigError("runtime.activation_checkpointing: this workload's model has no "
                                     "enable_gradient_checkpointing() (diffusers/transformers models do)")
        enable()
    if runtime.channels_last:
        model.to(memory_format=torch.channels_last)   # parameters keep their identity: the optimizer is unaffected
    if runtime.compile == "model":
        model.compile(mode=runtime.compile_mode)
        return 1
    if runtime.compile != "blocks":
        return 0
    names = set(getattr(model, "_repeated_blocks", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if not blocks:
        raise RuntimeConfigError("runtime.compile=blocks: this model names no repeated blocks (a "
                                 "`_repeated_blocks` list of class names, as diffusers models have); use compile=model")
    for block in blocks:
        block.compile(mode=runtime.compile_mode, fullgraph=True)
    return len(blocks)


def attention(runtime: Runtime):
    """A context that pins the scaled-dot-product-attention backend, or does nothing for auto."""
    if runtime.sdpa == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
               "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[runtime.sdpa]
    return sdpa_kernel([backend])


def compile_cache_env(runtime: Runtime, run_dir: Path, env: dict) -> dict:
    """Keep TorchInductor's caches (FX graphs, AOTAutograd, Triton kernels) beside the checkpoints.

    A restart, on this node or on a new one that mounts the same storage, then loads compiled
    kernels instead of compiling again; a user's own TORCHINDUCTOR_CACHE_DIR wins.
    """
    if runtime.compile == "off":
        return env
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(run_dir).resolve() / "compile-cache"))
    env.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    env.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    return env


def cache_bytes(env=os.environ) -> int:
    root = env.get("TORCHINDUCTOR_CACHE_DIR")
    if not root or not Path(root).is_dir():
        return 0
    return sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file())
