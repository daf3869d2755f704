"""Workloads the runner can train, registered by name; a user's own plugs in the same way.

A workload is a function `build(ctx: BuildContext) -> Built`. It makes the model, the optimizer
(and optionally an LR scheduler) and a deterministic data function; the runner owns the loop,
DDP, checkpoints and telemetry. See docs/runner-workloads.md for the interface and an example.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from runner.batching import BatchSplit

if TYPE_CHECKING:   # torch only where a worker builds: `runner execute` checks a workload's options without it
    import torch


@dataclass(frozen=True, kw_only=True)
class BuildContext:
    """What a workload may know when it builds."""

    rank: int
    world_size: int
    device: torch.device
    micro_batch: int          # samples per micro-batch on this rank
    accumulation: int         # micro-batches per optimizer step
    seed: int
    precision: str            # bf16 | fp16 | fp32
    options: dict = field(default_factory=dict)
    total_steps: int = 0      # optimizer steps in the run (an LR schedule's length)
    # A checkpoint is about to be loaded over the model, the optimizer and `state`: the builder may skip
    # their initial values (build on the meta device, then `to_empty`) and say so in Built.empty.
    restoring: bool = False

    @property
    def split(self) -> BatchSplit:
        return BatchSplit(global_batch=self.world_size * self.micro_batch * self.accumulation,
                          world_size=self.world_size, micro_batch=self.micro_batch, accumulation=self.accumulation)

    def following(self, indices: range) -> range:
        """The sample range this rank asks `batch` for after `indices` (for reading ahead)."""
        return self.split.following(indices, self.rank)


@dataclass(kw_only=True)
class Built:
    """What a workload hands the runner.

    `batch(indices)` returns the samples of `indices` (a `range` of global sample indices: step x
    global batch + i, this rank's micro-batch's slice of the step) as a pure function of the indices
    and the seed. That is what makes a resumed run bit-exact and a step's global batch the same at
    any world size. `loss(model, batch)` returns the scalar loss (the mean over the micro-batch).

    Optional, for a fine-tune:
    - `state`: more training state, {name: {key: tensor}} (an EMA of the weights), saved in every
      checkpoint beside the model and loaded in place on resume;
    - `after_step(step)`: called after each optimizer step with the new step number (the EMA update);
    - `validate(model)`: this rank's share of a held-out loss as a tensor (sum, count); the runner
      calls it on every rank every `validate_every` steps (0: never) and at the end, and reports the mean;
    - `export(folder)`: rank 0 writes the trained model into `folder` at the end of the run; the
      runner makes it RUN/final atomically;
    - `close()`: stops what the workload started (data loader threads);
    - `empty`: built for `ctx.restoring` without initial values (the runner builds again, initialised,
      when no checkpoint loads after all).
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    batch: Callable[[range], Any]
    loss: Callable[[torch.nn.Module, Any], torch.Tensor]
    scheduler: Any = None
    autocast_dtype: torch.dtype | None = None
    state: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    after_step: Callable[[int], None] | None = None
    validate: Callable[[torch.nn.Module], torch.Tensor] | None = None
    validate_every: int = 0
    export: Callable[[Any], None] | None = None
    close: Callable[[], None] | None = None
    empty: bool = False


Builder = Callable[[BuildContext], Built]


def workload(*, options: dict[str, str] | None = None,
             check: Callable[[dict[str, str]], None] | None = None,
             unused: tuple[str, ...] = (), imports: tuple[str, ...] = ()) -> Callable[[Builder], Builder]:
    """Declares a builder's `--option` keys (key -> what it does); any other key is refused before
    any process starts, so that a typo cannot silently train something else. `check(options)`, if
    given, validates the values there too (cheaply: no GPU, no model), raising WorkloadOptionError.
    `unused` names top-level packages that a library the build imports would import when installed
    and that the workload never uses: the worker hides them while it builds (`lean_imports`).
    `imports` names the modules the build imports that take time (a model library): workers forked
    from torchrun's agent find them imported there, once, before the fork (`preload`).

        @workload(options={"weights": "a diffusers UNet folder"})
        def build(ctx): ...
    """
    def mark(builder: Builder) -> Builder:
        setattr(builder, "options", dict(options or {}))   # read back with getattr: any callable may be a builder
        setattr(builder, "check", check)
        setattr(builder, "unused", tuple(unused))
        setattr(builder, "imports", tuple(imports))
        return builder
    return mark


@contextlib.contextmanager
def lean_imports(builder: Builder):
    """While the worker builds: the builder's `unused` packages that nothing has imported yet look absent
    (`sys.modules[name] = None`: `import name` raises ImportError and `importlib.util.find_spec` answers
    None, Python's documented way to block an import), so that a library probing for them at its import
    (diffusers: peft and transformers, 4-5 s of a 10 s import on the H200 host) leaves them out. They
    are visible again after the build; a library that probed keeps its answer for this process."""
    hidden = [name for name in getattr(builder, "unused", ()) if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None   # type: ignore[assignment]
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def preload(builder: Builder) -> list[str]:
    """Import the builder's declared `imports` as its build would (under `lean_imports`); the names imported.
    For a process that forks the workers (runner.torchrun): each begins with them imported."""
    names = list(getattr(builder, "imports", ()))
    with lean_imports(builder):
        for name in names:
            importlib.import_module(name)
    return names


def empty_build(make: Callable[[], torch.nn.Module], device: torch.device) -> torch.nn.Module | None:
    """The module `make()` builds, on `device` with storage but no initial values: built on the meta
    device (no initialisation runs, no weights are read), then `to_empty`. For a build that a checkpoint
    loads over (`ctx.restoring`). None when the module holds tensors a checkpoint does not keep
    (non-persistent buffers, which would stay uninitialised): build it initialised instead."""
    import torch

    with torch.device("meta"):
        module = make()
    if any(getattr(m, "_non_persistent_buffers_set", ()) for m in module.modules()):
        return None
    return module.to_empty(device=device)


def check_options(builder: Builder, name: str, options: dict[str, str], *, values: bool = True) -> None:
    """Refuse keys the workload does not declare and, with `values`, values its check refuses
    (WorkloadOptionError names them and the allowed ones). The workers check keys only: `runner
    execute` checked the values, and the build refuses what it cannot use."""
    declared = getattr(builder, "options", {})
    unknown = sorted(set(options) - set(declared))
    if unknown:
        allowed = ", ".join(f"{k} ({v})" for k, v in sorted(declared.items())) or "none (declare them with " \
            "runner.workloads.workload(options=...))"
        raise WorkloadOptionError(f"workload {name!r} takes no option {', '.join(map(repr, unknown))}; "
                                  f"its options: {allowed}")
    check = getattr(builder, "check", None)
    if values and check is not None:
        check(options)


def build_workload(builder: Builder, ctx: BuildContext) -> Built:
    """Build, and check that the workload follows today's interface."""
    built = builder(ctx)
    try:
        required = [p for p in inspect.signature(built.batch).parameters.values()
                    if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):   # a builtin or C callable: trust it
        return built
    if len(required) != 1:
        raise WorkloadOptionError(f"the workload's batch takes {len(required)} arguments; the interface is "
                                  "batch(indices), a range of global sample indices (docs/runner-workloads.md)")
    return built
# Registered names map to "module:function" so that importing the registry stays cheap.
REGISTRY: dict[str, str] = {
    "tiny": "runner.workloads.tiny:build",
    "sdxl-unet": "runner.workloads.sdxl:build",
}


class UnknownWorkload(LookupError):
    pass


class WorkloadOptionError(ValueError):
    """A workload's --option value it cannot honour (the run stops: restarting cannot help)."""


def resolve(model: str, entry: str | None = None) -> Builder:
    """The builder for a plan's model: a registered name, or the entry point the user named.

    A plan alone can never make the runner import arbitrary code: a model that is not registered
    runs only when the user passes `--workload-entry module:function` naming it on the command line.
    """
    target = entry or REGISTRY.get(model)
    if target is None:
        raise UnknownWorkload(f"workload {model!r} is not registered ({', '.join(sorted(REGISTRY))}); "
                              "to run your own, pass --workload-entry module:function")
    module_name, _, function = target.partition(":")
    if not module_name or not function:
        raise UnknownWorkload(f"--workload-entry {target!r}: expected module:function")
    try:
        builder = getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError) as exc:
        raise UnknownWorkload(f"cannot import {target!r}: {exc}") from None
    if not callable(builder):
        raise UnknownWorkload(f"{target!r} is not callable")
    return builder
