"""Runner speed settings: how the training loop runs (compilation, attention kernels, memory format).

A measured profile records the settings it was measured under; a plan carries the settings of the
profile it was priced with (plan.json `runtime`), so that the job runs the configuration whose
throughput and restart cost the plan assumed. `runner execute --runtime KEY=VALUE` overrides them.

Only the keys and values below are accepted: a plan is data, and these are choices among fixed
code paths, never code or command lines. No torch here: planning must not need it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Sequence

from costsim.errors import InputError

COMPILE = ("off", "blocks", "model")
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "reduce-overhead", "max-autotune")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")   # the modes that replay the compiled graphs as CUDA graphs
SDPA = ("auto", "flash", "efficient", "cudnn", "math")
DDP_COMM = ("fp32", "bf16")
DDP_GRAPH = ("split", "whole")
FP8 = ("off", "blocks", "model")
FP8_SELECT = ("all", "large")
GEGLU = ("fused", "split")


@dataclass(frozen=True, kw_only=True)
class Runtime:
    """Runner settings. Defaults are the plain eager loop, which runs anywhere."""

    compile: str = "off"                  # off | blocks (each repeated block) | model (the whole model)
    compile_mode: str = "default"         # torch.compile mode
    # compiled graphs only: Inductor times its own Triton kernels' block sizes and warps around its heuristic's
    # choice, one coordinate at a time, the first time each kernel runs, and keeps the fastest in the compile cache
    # (SDXL on an H200: no gain, and torch 2.11 tunes again at every start: docs/runner-speed.md)
    coordinate_descent_tuning: bool = False
    # a GEGLU feed-forward (diffusers', SDXL's transformer blocks): its projection to twice the width as one
    # linear layer whose output is split in two (fused), or two linear layers on the weight's halves (split: the
    # same parameters and checkpoint, and no concatenation of the halves' gradients in the backward)
    geglu: str = "fused"
    channels_last: bool = False           # NHWC memory format for convolution models
    sdpa: str = "auto"                    # scaled-dot-product attention backend
    activation_checkpointing: bool = False
    # compiled graphs only: the share of their activations the backward may keep; below 1, AOTAutograd's
    # partitioner recomputes the cheapest of the rest (selective activation checkpointing, chosen by cost)
    activation_memory_budget: float = 1.0
    fp8: str = "off"                      # linear layers in fp8 with dynamic scaling (torchao): off | blocks | model
    # which of them: every one whose dimensions fp8 can take, or only the large ones (torchao's tensor-wise
    # threshold: not out_features <= 4096 with in_features <= 1024), where the casts cost less than fp8 saves
    fp8_select: str = "all"
    ddp_bucket_mb: float = 25.0           # DDP gradient bucket size (PyTorch's default 25)
    ddp_comm: str = "fp32"                # gradients all-reduced as they are, or compressed to bf16
    ddp_graph: str = "split"              # compiled under DDP: split at the gradient buckets, or kept whole
    # compile=model only: the whole model's compiled forward and backward saved in the compile cache as one file
    # (torch.compile's ahead-of-time compilation) and loaded at a restart, which then traces nothing (runner.precompile)
    precompile: bool = False
    cudnn_benchmark: bool = False         # time cuDNN's convolution algorithms once per shape, keep the fastest
    expandable_segments: bool = False     # CUDA caching allocator grows segments instead of adding new ones
    gc_every: int = 0                     # 0: Python's automatic garbage collection; N: only every N steps

    @property
    def cuda_graphs(self) -> bool:
        """Whether the compiled graphs replay as CUDA graphs (Inductor's graph trees)."""
        return self.compile != "off" and self.compile_mode in CUDA_GRAPH_MODES

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """Only what differs from the defaults, e.g. 'compile=blocks channels_last=true'."""
        default = Runtime()
        changed = [f"{f.name}={_text(getattr(self, f.name))}" for f in fields(self)
                   if getattr(self, f.name) != getattr(default, f.name)]
        return " ".join(changed) or "eager defaults"


def _text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_runtime(raw, source: str, prefix: str = "runtime", base: Runtime | None = None) -> Runtime:
    """A Runtime from a mapping (plan.json, a profile, or --runtime pairs); errors name the field."""
    if raw is None:
        return base or Runtime()
    if not isinstance(raw, dict):
        raise InputError(source, prefix, "expected a mapping of runner settings")
    values = (base or Runtime()).as_dict()
    allowed = {f.name: f.type for f in fields(Runtime)}
    for key, value in raw.items():
        where = f"{prefix}.{key}"
        if key not in allowed:
            raise InputError(source, where, f"unknown setting; allowed: {', '.join(allowed)}")
        if key == "compile":
            values[key] = _choice(value, COMPILE, source, where)
        elif key == "compile_mode":
            values[key] = _choice(value, COMPILE_MODES, source, where)
        elif key == "sdpa":
            values[key] = _choice(value, SDPA, source, where)
        elif key == "ddp_comm":
            values[key] = _choice(value, DDP_COMM, source, where)
        elif key == "ddp_graph":
            values[key] = _choice(value, DDP_GRAPH, source, where)
        elif key == "fp8":
            values[key] = _choice(value, FP8, source, where)
        elif key == "fp8_select":
            values[key] = _choice(value, FP8_SELECT, source, where)
        elif key == "geglu":
            values[key] = _choice(value, GEGLU, source, where)
        elif key == "activation_memory_budget":
            values[key] = _fraction(value, source, where)
        elif key == "gc_every":
            values[key] = _count(value, source, where)
        elif key in ("channels_last", "activation_checkpointing", "cudnn_benchmark", "expandable_segments",
                     "coordinate_descent_tuning", "precompile"):
            values[key] = _boolean(value, source, where)
        elif key == "ddp_bucket_mb":
            values[key] = _positive(value, source, where)
    if values["ddp_graph"] == "whole" and values["compile"] == "off":
        raise InputError(source, f"{prefix}.ddp_graph", "whole applies to compiled models: set compile=blocks or "
                         "compile=model, or leave ddp_graph at split")
    if values["activation_memory_budget"] < 1 and values["compile"] == "off":
        raise InputError(source, f"{prefix}.activation_memory_budget", "applies to compiled graphs: set "
                         "compile=blocks or compile=model, or activation_checkpointing=true for the eager model")
    if values["coordinate_descent_tuning"] and values["compile"] == "off":
        raise InputError(source, f"{prefix}.coordinate_descent_tuning", "tunes compiled kernels: set compile=blocks "
                         "or compile=model, or leave it at false")
    if values["precompile"] and (values["compile"] != "model" or values["ddp_graph"] != "whole"):
        raise InputError(source, f"{prefix}.precompile", "saves the whole model's compiled graph: set compile=model "
                         "and ddp_graph=whole, or leave precompile at false")
    if values["geglu"] == "split" and values["fp8"] != "off":
        raise InputError(source, f"{prefix}.geglu", "split multiplies the projection's halves itself, outside fp8's "
                         "layers: leave geglu at fused with fp8, or set fp8=off")
    if values["fp8_select"] != "all" and values["fp8"] == "off":
        raise InputError(source, f"{prefix}.fp8_select", "chooses among fp8's layers: set fp8=blocks or fp8=model, "
                         "or leave fp8_select at all")
    return Runtime(**values)


def parse_pairs(pairs: Sequence[str], source: str = "--runtime", base: Runtime | None = None) -> Runtime:
    """Runtime from KEY=VALUE strings (the command line), over `base`."""
    raw = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(source, pair, "expected KEY=VALUE, e.g. compile=blocks")
        raw[key.strip()] = value.strip()
    return parse_runtime(raw, source, prefix="runtime", base=base)


def _choice(value, allowed: tuple[str, ...], source: str, where: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise InputError(source, where, f"got {value!r}; allowed: {', '.join(allowed)}")
    return value


def _boolean(value, source: str, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
        return value.lower() in ("true", "1", "yes", "on")
    raise InputError(source, where, f"got {value!r}; expected true or false")


def _positive(value, source: str, where: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not number > 0 or number == float("inf"):
        raise InputError(source, where, f"got {value!r}; expected a positive number of MB")
    return number


def _fraction(value, source: str, where: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not 0 < number <= 1:
        raise InputError(source, where, f"got {value!r}; expected a fraction in (0, 1] (1: keep every activation)")
    return number


def _count(value, source: str, where: str) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit():
        raise InputError(source, where, f"got {value!r}; expected a whole number of steps (0: automatic)")
    return int(text)
