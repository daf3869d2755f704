"""The workers' environment: what CUDA, Inductor and Python read at a worker's start. No torch here: the
supervisor computes it before torchrun starts, and a notice's new life should not pay torch's import twice."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from costsim.runtime import Runtime


def worker_env(runtime: Runtime, run_dir: Path, env: dict) -> dict:
    """The workers' environment for these settings (read by CUDA and Inductor at start); the user's
    own values win.

    With compilation, TorchInductor's caches (FX graphs, AOTAutograd, Triton kernels) live beside the
    checkpoints: a restart, on this node or on a new one that mounts the same storage, then loads
    compiled kernels instead of compiling again.
    """
    if runtime.expandable_segments:
        env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    if runtime.compile == "off":
        return env
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(run_dir).resolve() / "compile-cache"))
    env.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    env.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    if runtime.coordinate_descent_tuning:   # read by Inductor's config at its import
        env.setdefault("TORCHINDUCTOR_COORDINATE_DESCENT_TUNING", "1")
    return env


def bytecode_env(run_dir: Path, env: dict, probe: str = "torch") -> dict:
    """The workers' environment where Python writes no bytecode (PYTHONDONTWRITEBYTECODE, as some container
    images set) and the installation carries none (`probe`, torch, has no .pyc): every start would compile
    torch and the workload's libraries from source again (on the H200 host: torch 3.5-4.3 s, diffusers 11-17 s,
    each start). The workers, and torchrun, then keep their bytecode in RUN/pycache (PYTHONPYCACHEPREFIX):
    nothing is written into the installation, and every start after the first reads it (Python checks each
    file against its source). A PYTHONPYCACHEPREFIX of the user's own wins; elsewhere nothing changes."""
    if not env.get("PYTHONDONTWRITEBYTECODE") or env.get("PYTHONPYCACHEPREFIX"):
        return env
    spec = importlib.util.find_spec(probe)
    if spec is None or spec.origin is None or Path(importlib.util.cache_from_source(spec.origin)).exists():
        return env   # an installation with bytecode: Python reads it
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(Path(run_dir).resolve() / "pycache")
    return env
