"""runtime.precompile: the whole model's compiled forward and backward kept in the compile cache as one file, so that
a restart loads it instead of tracing the model again.

Under `compile=model` a new process's first step traces the whole model with Dynamo even when every Inductor and
AOTAutograd cache answers: 16.4 s of an H100's 30.4 s first step after a resume under CUDA graphs
(data/measurements/2026-12-07-h100-graphs-resume-load), and Dynamo's trace is not cached. torch.compile's
ahead-of-time compilation (`torch.compile(fn, fullgraph=True).aot_compile(example_inputs)`: torch 2.11 behind
`torch._dynamo.config.enable_aot_compile`, on in 2.13; docs: "Ahead-of-Time Compilation with torch.compile") traces,
compiles and packages the forward and its backward into one callable that can be saved and loaded in another process
without tracing. Measured: data/measurements/2026-12-07-h100-precompile (scripts/bench_precompile.py).

So with precompile on, the first call of the model's forward in a process (per kind of call: the inputs' shapes,
dtypes, devices and strides, grad mode, autocast, training mode) looks in COMPILE_CACHE/precompiled/ for the file of
that call, named by a hash of everything it depends on (`artefact_key`): it loads it, or compiles it ahead of time
and saves it (atomically: a temporary file renamed into place), and every later call of that kind runs it. The file
is written with a SHA-256 of its contents and checked before it is loaded: a damaged one is reported and compiled
again, never run. A model that ahead-of-time compilation cannot take (a graph break, a guard it cannot save) runs
under plain torch.compile instead, with a warning, and without CUDA graphs (FALLBACK_MODES): under them, on an H100
with torch 2.11, the one such fallback measured failed its first backward in every life, so the run stopped (the
measurements' README, item 3; the cause not established): a run a little slower beats one that cannot go on.

A start that finds this model's files loads them on a thread (`preload`), started by runner.train as soon as the model
is prepared (on a new node, once the compile cache is fetched): the load (3.0 s of the full SDXL UNet's resumed first
step on an H100 under CUDA graphs, where no warm step runs) then runs beside the wrap and the checkpoint's read, and
the model's first call (the first step's, or the warm step's: runner.warm_step) takes the loaded function, waiting
for it if need be. Files are preloaded newest first (a load marks its file as used), at most PRELOAD_MOST: the kinds
of call this model met lately. Each file carries the grad mode and autocast of its kind of call, and is loaded under
them: its tensors' guards take their dispatch keys from the loading thread's state, and a drill with the tiny SDXL
UNet under bf16 autocast on the CPU found a file preloaded outside autocast failing them (AutocastCPU missing) at
the first call. Loaded under its state it fits: that drill's restart took 6.3 s, against 7.5 s loading the file
inside the call (data/measurements/2026-12-07-h100-precompile/cpu/preload-sdxl-tiny). A preloaded function that does
not fit all the same is reported and loaded again inside the call. Opt-in (`COSTSIM_PRECOMPILE_PRELOAD=1`): on an
H100 under CUDA graphs the preloaded file fitted and its load left the first step (15.7 s against 18.5 s), but the
restart was no shorter (29.3 s against 28.8 s, one pair on one machine: the load took 7.5 s on its thread beside the
read against 3.5 s alone; data/measurements/2026-12-07-h100-graph-tree-index). With the graph-tree index, A B A on one
H100, it was longer: 29.2 s against 23.3 and 26.3 s, the checkpoint's read 6.6 s against 2.3-2.8 s beside the
thread's unpickling (data/measurements/2026-12-07-h100-preload-indexed).

The file is code, as Inductor's cache is (its kernels and wrappers, which the workers import and run): it lives in
the run's compile cache, written by the runner itself, and travels to the job's next node only with that cache
(runner.compile_share, opt-in, through a store only the job's runners can write). It is never read from a plan.

Guards: the saved function keeps Dynamo's guards on its input tensors' metadata and the global state (grad mode,
autocast) only, the portable ones; the module's attributes are not guarded, so the file's name carries what they
depend on instead: the model's classes, structure, parameter shapes and dtypes, the source files of its modules'
classes, torch's and the runner's settings. Nor are its parameters and buffers (torch rebuilds every tensor guard at
each load, a fake tensor apiece: the full SDXL UNet has 1,685): the file's header keeps a hash of their layout
(`tensor_layout`: names, shapes, strides, dtypes, devices, requires_grad), and a call whose module does not match it
compiles again, as a failed guard would.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree

from costsim.contract.jsonfiles import replacing
from costsim.runtime import CUDA_GRAPH_MODES
from runner import warm_step
from runner.speed import env_switch

FOLDER = "precompiled"
MAGIC = b"costsim-precompiled-2\n"
DIGEST_BYTES = 64   # the hex SHA-256 of what follows it
# the mode a fallback to torch.compile runs in: the same, less CUDA graphs (module docstring)
FALLBACK_MODES = {"reduce-overhead": "default", "max-autotune": "max-autotune-no-cudagraphs"}
PRELOAD_ENV = "COSTSIM_PRECOMPILE_PRELOAD"
TENSOR_GUARDS_ENV = "COSTSIM_PRECOMPILE_TENSOR_GUARDS"
# where a loaded function carries the layout of the parameters and buffers it was compiled with (`tensor_layout`)
TENSORS_ATTRIBUTE = "_costsim_tensor_layout"
PRELOAD_MOST = 4    # files preloaded at most: a training call's kind, and validation's, with room for a batch change


class Precompiled:
    """The model's forward, ahead-of-time compiled per kind of call (module docstring). Installed as the bare
    model's `forward` (`install`), so DDP, hooks and the checkpoint's keys see the same module."""

    def __init__(self, module: torch.nn.Module, mode: str, settings: dict, folder: Path,
                 warn: Callable[[str], None] | None = None, tensor_guards: bool = False):
        self.module, self.mode, self.folder = module, mode, Path(folder)
        self.tensor_guards = tensor_guards   # torch's guards on the parameters and buffers too (TENSOR_GUARDS_ENV)
        self.original = module.forward   # the bound eager forward (force_eager runs it)
        self.settings = dict(settings)
        self.warn = warn or (lambda message: print(f"runner: warning: {message}", file=sys.stderr, flush=True))
        self.functions: dict[tuple, Callable] = {}
        self.events: list[dict] = []   # each kind of call's load or compile (report)
        self._lock = threading.Lock()
        self._fallback: Callable | None = None
        self._model_key: str | None = None
        self._preloading: threading.Thread | None = None
        self._preloaded: dict[str, tuple[Any, float]] = {}   # file name: (the loaded function or None, seconds)

    def __call__(self, *args, **kwargs):
        if _forced_eager():   # torch.compiler.set_stance("force_eager"), as the runner's validation uses
            return self.original(*args, **kwargs)
        kind = call_kind(args, kwargs, self.module.training)
        function = self.functions.get(kind)
        if function is None:
            with self._lock:   # the warm step's thread and the main one may ask at once
                function = self.functions.get(kind) or self._obtain(kind, args, kwargs)
                self.functions[kind] = function
        return function(*args, **kwargs)

    def report(self) -> list[dict]:
        return list(self.events)

    def preload(self, device: torch.device | None = None) -> int:
        """Start loading this model's saved files (the newest PRELOAD_MOST) on a daemon thread, for the first calls
        to take (`_obtain`); how many. `device`: the CUDA device the thread loads for (this rank's)."""
        if self._preloading is not None:   # once a process
            return 0
        paths = self._saved_files()[:PRELOAD_MOST]
        if not paths:
            return 0

        def run():
            try:
                if device is not None and device.type == "cuda":
                    torch.cuda.set_device(device)   # a new thread's current device is the first, not this rank's
                for path in paths:
                    started = time.perf_counter()
                    loaded = self._load(path)
                    self._preloaded[path.name] = (loaded, time.perf_counter() - started)
            finally:
                warm_step.short_switches.release()
        # the load unpickles, holding the interpreter lock for long stretches: the read's threads beside it get the
        # lock back within the warm step's short switch interval (runner.warm_step says what the default cost)
        warm_step.short_switches.acquire()
        self._preloading = threading.Thread(target=run, name="precompile-preload", daemon=True)
        self._preloading.start()
        return len(paths)

    def _saved_files(self) -> list[Path]:
        """This model's files in the folder, the most recently written or loaded first."""
        found = []
        try:
            for entry in os.scandir(self.folder):
                if entry.name.startswith(f"{self.model_key()}-") and entry.name.endswith(".pt"):
                    with contextlib.suppress(OSError):   # removed meanwhile
                        found.append((entry.stat().st_mtime, Path(entry.path)))
        except OSError:   # no folder yet
            return []
        return [path for _, path in sorted(found, key=lambda pair: pair[0], reverse=True)]

    def _preloaded_file(self, path: Path) -> tuple[Any, float] | None:
        """What the preload made of `path` (waiting for it to end), or None if it did not try that file. A call whose
        file the preload does not try waits all the same: its load or compile must not run beside the preload's (the
        Inductor settings a load patches are global, and Dynamo compiles one thing at a time); the wait is a few
        seconds of loads, against a compile's minutes."""
        if self._preloading is None:
            return None
        self._preloading.join()
        return self._preloaded.pop(path.name, None)

    # -- one kind of call --------------------------------------------------------------------------------
    def _obtain(self, kind: tuple, args: tuple, kwargs: dict) -> Callable:
        path = self.folder / f"{self.model_key()}-{_digest(repr(kind))[:16]}.pt"
        started = time.perf_counter()
        preloaded = self._preloaded_file(path)
        waited_s = time.perf_counter() - started
        loaded, load_s = preloaded if preloaded is not None else (self._load(path), None)
        layout = tensor_layout(self.module)   # what the parameters' and buffers' guards would check, once a call
        fits = loaded is not None and self._fits(loaded, layout, args, kwargs)
        if load_s is not None and loaded is not None and not fits and _layout_of(loaded) == layout:
            # loaded outside this call's autocast: its tensors' guards took their dispatch keys then (a tiny SDXL
            # UNet under bf16 autocast on the CPU lacked AutocastCPU; the file loaded inside the call fits): again here
            self.events.append({"op": "preload did not fit", "file": path.name,
                                "guard": _failed_guard(loaded, self.module, args, kwargs)})
            loaded, load_s = self._load(path), None
            fits = loaded is not None and self._fits(loaded, layout, args, kwargs)
        if loaded is not None and not fits:
            failed = (_failed_guard(loaded, self.module, args, kwargs) if _layout_of(loaded) == layout else
                      "the model's parameters or buffers are not those it was compiled with (their names, shapes, "
                      "strides, dtypes, devices or requires_grad)")
            self.warn(f"runtime.precompile: {path} does not fit this call (its guards fail{': ' if failed else ''}"
                      f"{failed}); compiling it again")
            self.events.append({"op": "guards failed", "file": path.name, "guard": failed})
            loaded = None
        if loaded is not None:
            with contextlib.suppress(OSError):
                os.utime(path)   # used now: the next start preloads it first
            event = {"op": "load", "file": path.name, "bytes": path.stat().st_size,
                     "duration_s": round(time.perf_counter() - started if load_s is None else load_s, 3)}
            if load_s is not None:
                event.update(preloaded=True, waited_s=round(waited_s, 3))
            self.events.append(event)
            return _bound(loaded, self.module)
        # Dynamo pickles the module with its guards: this object (and its lock) leaves its attributes meanwhile, and
        # so do the parameters' gradients (made before the first step under DDP, runner.train.grads_for_buckets),
        # which it pickles as a placeholder that the load then cannot assign back
        installed = self.module.__dict__.pop("forward", None)
        grads = {p: p.grad for p in self.module.parameters() if p.grad is not None}
        for parameter in grads:
            parameter.grad = None
        try:
            compiled = _compiled(self.mode, self.tensor_guards).aot_compile(((self.module, *args), kwargs))
        except Exception as exc:   # noqa: BLE001 - any failure of the experimental path falls back to torch.compile
            reason, mode = _first_line(exc), FALLBACK_MODES.get(self.mode, self.mode)
            graphs = f" in compile mode {mode} (no CUDA graphs)" if mode != self.mode else ""
            self.warn(f"runtime.precompile: the model could not be compiled ahead of time ({reason}); it runs "
                      f"under torch.compile instead{graphs}, traced again at every start")
            self.events.append({"op": "fallback", "reason": reason, "mode": mode,
                                "duration_s": round(time.perf_counter() - started, 3)})
            return self.fallback()
        finally:
            for parameter, grad in grads.items():
                parameter.grad = grad
            if installed is not None:
                self.module.forward = installed
        compile_s = time.perf_counter() - started
        size = self._save(compiled, path, kind)
        self.events.append({"op": "compile", "file": path.name, "bytes": size, "compile_s": round(compile_s, 3),
                            "duration_s": round(time.perf_counter() - started, 3)})
        return _bound(compiled, self.module)

    def fallback(self) -> Callable:
        if self._fallback is None:
            self._fallback = torch.compile(self.original, mode=FALLBACK_MODES.get(self.mode, self.mode))
        return self._fallback

    def _fits(self, loaded, layout: str, args: tuple, kwargs: dict) -> bool:
        """Whether `loaded` may run this call: the module's parameters and buffers laid out as when it was compiled
        (`layout`: the check that stands in for their tensor guards, which the saved function does not carry), and
        its own guards pass."""
        return _layout_of(loaded) == layout and loaded.guard_check(self.module, *args, **kwargs)

    def _load(self, path: Path):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.warn(f"runtime.precompile: {path} could not be read ({exc.strerror or exc}); compiling it again")
            return None
        unpacked = unpack(checked_payload(data))
        if unpacked is None:
            self.warn(f"runtime.precompile: {path} is damaged (its checksum does not match); compiling it again")
            self.events.append({"op": "damaged", "file": path.name, "bytes": len(data)})
            return None
        state, function = unpacked
        try:
            # the mode's Inductor settings while it loads: whether the loaded graphs replay as CUDA graphs is read
            # from them then, not from the file (torch 2.11 and 2.13: aot_autograd_result's deserialisation); and
            # the grad mode and autocast it was compiled in: its tensors' guards take their dispatch keys from the
            # loading thread's (the preload's thread runs outside the step's autocast)
            with torch._inductor.config.patch(torch._inductor.list_mode_options(self.mode)), global_state(state):
                loaded = torch.compiler.load_compiled_function(io.BytesIO(function),
                                                               f_globals=vars(sys.modules[__name__]))
            setattr(loaded, TENSORS_ATTRIBUTE, state.get("tensors"))   # checked at the call (a preload comes early)
            return loaded
        except Exception as exc:   # noqa: BLE001 - a file another torch wrote, say: compile afresh
            self.warn(f"runtime.precompile: {path} could not be loaded ({_first_line(exc)}); compiling it again")
            self.events.append({"op": "unloadable", "file": path.name, "reason": _first_line(exc)})
            return None

    def _save(self, compiled, path: Path, kind: tuple) -> int | None:
        """The function, with the global state of its kind of call and a checksum, at `path`, atomically; its size,
        or None if it could not be written (a warning: this life runs it all the same, the next compiles again)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            state = {**kind_state(kind), "tensors": tensor_layout(self.module)}
            write_checked(path, pack(state, self._function_bytes(compiled)))
            return path.stat().st_size
        except Exception as exc:   # noqa: BLE001 - a full disk, or a function torch cannot serialise
            self.warn(f"runtime.precompile: the compiled model was not saved to {path} ({_first_line(exc)}); the "
                      "next start compiles it again")
            return None

    def _function_bytes(self, compiled) -> bytes:
        """The compiled function as torch saves it: in memory where torch can (2.13's `serialize`: one write, the
        checked file's), else through a scratch file (torch's save takes only a path)."""
        serialize = getattr(type(compiled), "serialize", None)
        function = getattr(serialize(compiled), "serialized_data", None) if serialize is not None else None
        if isinstance(function, bytes):
            return function
        with tempfile.TemporaryDirectory(dir=self.folder, prefix="tmp-") as scratch:
            raw = Path(scratch) / "function.pt"
            compiled.save_compiled_function(str(raw))
            return raw.read_bytes()

    def model_key(self) -> str:
        if self._model_key is None:
            settings = {**self.settings, "tensor_guards": True} if self.tensor_guards else self.settings
            self._model_key = artefact_key(self.module, self.mode, settings)[:24]
        return self._model_key


def install(module: torch.nn.Module, mode: str, settings: dict, folder: Path,
            warn: Callable[[str], None] | None = None, tensor_guards: bool = False) -> Precompiled:
    """Put a Precompiled forward on `module` (an instance attribute over its class's forward)."""
    if mode in CUDA_GRAPH_MODES:
        # CUDA graph trees keep their state in thread-local storage that autograd's threads inherit, set up when
        # the module is first imported: here, on the main thread, not inside a compile or a load (a first run on
        # an H100 whose ahead-of-time compile failed then failed its backward: "_is_key_in_tls")
        import torch._inductor.cudagraph_trees  # noqa: F401
    precompiled = Precompiled(module, mode, settings, folder, warn, tensor_guards)
    module.forward = precompiled
    return precompiled


def installed(module: torch.nn.Module) -> Precompiled | None:
    """`module`'s Precompiled forward, if it has one."""
    forward = module.__dict__.get("forward")
    return forward if isinstance(forward, Precompiled) else None


def tensor_guards_enabled(env=os.environ) -> bool:
    """COSTSIM_PRECOMPILE_TENSOR_GUARDS: 1 keeps torch's guards on every parameter and buffer in the saved function
    (rebuilt at each load), 0 (the default) checks their layout itself (`tensor_layout`)."""
    return env_switch(env, TENSOR_GUARDS_ENV, "0", "torch's guards on every parameter and buffer, rebuilt at each load",
                      "the runner's check of their layout instead, the default")


def preload_enabled(env=os.environ) -> bool:
    """COSTSIM_PRECOMPILE_PRELOAD: 1 loads the saved files beside the start, 0 (the default) at the first call."""
    return env_switch(env, PRELOAD_ENV, "0", "load the saved model beside the start", "at the first call, the default")


def events(module: torch.nn.Module) -> list[dict]:
    """What `module`'s Precompiled forward did in this process (none if it has none)."""
    forward = installed(module)
    return forward.report() if forward is not None else []


def default_folder(env=os.environ) -> Path:
    """COMPILE_CACHE/precompiled: the run's compile cache (TORCHINDUCTOR_CACHE_DIR), or torch's default one."""
    root = env.get("TORCHINDUCTOR_CACHE_DIR")
    if not root:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
        root = cache_dir()
    return Path(root) / FOLDER


# -- what a saved function depends on ---------------------------------------------------------------------
def call_kind(args: tuple, kwargs: dict, training: bool) -> tuple:
    """What the compiled function was specialised to, for one call: each input tensor's shape, stride, dtype,
    device and requires_grad, the other inputs' values, grad mode, autocast, the module's training flag."""
    leaves, spec = _pytree.tree_flatten((args, kwargs))
    described = tuple((tuple(leaf.shape), leaf.stride(), str(leaf.dtype), str(leaf.device), leaf.requires_grad)
                      if isinstance(leaf, torch.Tensor) else (type(leaf).__name__, repr(leaf)) for leaf in leaves)
    autocast = tuple((device, torch.is_autocast_enabled(device), str(torch.get_autocast_dtype(device)))
                     for device in ("cpu", "cuda"))
    return (str(spec), described, torch.is_grad_enabled(), autocast, training)


def artefact_key(module: torch.nn.Module, mode: str, settings: dict) -> str:
    """A hash of what the compiled model depends on beyond its call: torch and the device, the model's modules
    (their classes and the source files defining them), its parameters' and buffers' names, shapes and dtypes, the
    compile mode and the runner's settings."""
    parts: list[str] = [torch.__version__, str(torch.version.cuda), mode, repr(sorted(settings.items()))]
    if torch.cuda.is_available():
        parts += [torch.cuda.get_device_name(), repr(torch.cuda.get_device_capability())]
    # the source files by their modules' names, not their paths: a new node with the same code under another
    # install path (another venv) finds the same file
    files: dict[str, str] = {__name__: __file__}   # what is compiled (class_forward) and how
    for name, sub in module.named_modules():
        parts.append(f"{name}:{type(sub).__module__}.{type(sub).__qualname__}")
        source = _source_file(type(sub))
        if source is not None:
            files[type(sub).__module__] = source
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        parts.append(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}:{tensor.requires_grad}")
    for owner, source in sorted(files.items()):
        try:
            parts.append(f"{owner}:{_digest(Path(source).read_bytes())}")
        except OSError:
            parts.append(f"{owner}:unreadable")
    return _digest("\n".join(parts))


# -- the file ----------------------------------------------------------------------------------------------
# A file is MAGIC, the SHA-256 of the rest, then the rest: one line of JSON (the global state of the call it was
# compiled for: `kind_state`), then what torch's save_compiled_function wrote.
def kind_state(kind: tuple) -> dict:
    """The global state a kind of call (`call_kind`) was made in: grad mode and each device's autocast."""
    _, _, grad, autocast, _ = kind
    return {"grad": grad, "autocast": [list(entry) for entry in autocast]}


@contextlib.contextmanager
def global_state(state: dict):
    """Grad mode and autocast as `state` says, on this thread, for the block (those that differ from it now)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.set_grad_enabled(state["grad"]))
        for device, enabled, dtype in state["autocast"]:
            wanted = getattr(torch, dtype.removeprefix("torch."))
            if torch.is_autocast_enabled(device) != enabled or (enabled and torch.get_autocast_dtype(device) != wanted):
                stack.enter_context(torch.autocast(device, dtype=wanted, enabled=enabled))
        yield


def pack(state: dict, function: bytes) -> bytes:
    return json.dumps(state, sort_keys=True).encode() + b"\n" + function


def unpack(payload: bytes | None) -> tuple[dict, bytes] | None:
    """`pack`'s state and function, or None if `payload` is none or not what `pack` wrote."""
    if payload is None:
        return None
    line, newline, function = payload.partition(b"\n")
    try:
        state = json.loads(line) if newline else None
    except ValueError:
        return None
    # a state `global_state` cannot take fails the load, which then compiles afresh (Precompiled._load)
    return (state, function) if isinstance(state, dict) else None


def write_checked(path: Path, payload: bytes) -> None:
    """MAGIC, the payload's SHA-256 in hex, the payload: written to a temporary file beside `path`, renamed."""
    with replacing(path) as temporary, open(temporary, "wb") as out:
        out.write(MAGIC + hashlib.sha256(payload).hexdigest().encode() + payload)
        out.flush()
        os.fsync(out.fileno())


def read_kept(path: Path):
    """The payload of a file `write_checked` wrote at `path`: None where there is none (or it cannot be read), False
    where it is damaged (not such a file, or its checksum does not match). For the small files a start keeps beside
    the compile cache (runner.inductor_bytecode, runner.autotune_kept), which are data to check, never trusted."""
    try:
        payload = checked_payload(path.read_bytes())
    except OSError:
        return None
    return False if payload is None else payload


def keep(path: Path, payload: bytes) -> bool:
    """`payload` written checked at `path` (its folder made); False if it could not be (a full or read-only disk:
    the start that keeps it runs all the same, the next does the work again)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_checked(path, payload)
        return True
    except OSError:
        return False


def checked_payload(data: bytes) -> bytes | None:
    """The payload of a file `write_checked` wrote, or None if it is not one or its checksum does not match."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + DIGEST_BYTES:
        return None
    digest = data[len(MAGIC):len(MAGIC) + DIGEST_BYTES].decode("ascii", errors="replace")
    payload = data[len(MAGIC) + DIGEST_BYTES:]
    return payload if hashlib.sha256(payload).hexdigest() == digest else None


# -- helpers -----------------------------------------------------------------------------------------------
def class_forward(module: torch.nn.Module, *args, **kwargs):
    """What is compiled: the module's class's forward (not its call: the module's own call, which runs its hooks,
    is what calls the saved function). A function of this module, so that the saved one names it and resolves its
    globals here."""
    return type(module).forward(module, *args, **kwargs)


def _compiled(mode: str, tensor_guards: bool = False):
    # mode's options spelled out: torch.compile takes a mode or options, and the guard filter is an option
    kept = portable_guards_with_tensors if tensor_guards else portable_guards
    options: dict[str, Any] = {**torch._inductor.list_mode_options(mode), "guard_filter_fn": kept}
    with torch._dynamo.config.patch(enable_aot_compile=True):   # off by default in torch 2.11: no .aot_compile
        return torch.compile(class_forward, fullgraph=True, options=options)


def portable_guards(entries) -> list[bool]:
    """Keep the guards a saved function can carry (torch.compiler.keep_portable_guards_unsafe's choice, spelled
    out for the torch versions without it): the global state (grad mode, autocast) and the shape environment, and
    each input tensor's metadata. The module's attributes go unguarded: the file's name covers them. So do its
    parameters and buffers: their layouts are checked by the runner instead (`tensor_layout`, kept in the file's
    header), since torch rebuilds each tensor guard at every load with a fake tensor of its own (the full SDXL UNet's
    1,685, about 2.5 s of a 6.45 s load on a 2-core CPU)."""
    return [kept and not (entry.guard_type == "TENSOR_MATCH" and _module_tensor(entry.name))
            for entry, kept in zip(entries, portable_guards_with_tensors(entries))]


def portable_guards_with_tensors(entries) -> list[bool]:
    """`portable_guards` and the parameters' and buffers' tensor guards (COSTSIM_PRECOMPILE_TENSOR_GUARDS=1): the
    choice before 2026-12-08, kept to measure against."""
    return [entry.guard_type in ("GLOBAL_STATE", "SHAPE_ENV")
            or (entry.guard_type == "TENSOR_MATCH" and not entry.is_global) for entry in entries]


def _layout_of(loaded) -> str | None:
    """The parameters' and buffers' layout a loaded function was compiled with (its file's header, `_load`)."""
    return getattr(loaded, TENSORS_ATTRIBUTE, None)


def _module_tensor(source: str) -> bool:
    """Whether a guard's source names a parameter or buffer of the compiled module (`class_forward`'s first
    argument): module._modules['inner']._parameters['weight'], module._buffers['scale']."""
    return source.startswith("module.") and ("._parameters[" in source or "._buffers[" in source)


def tensor_layout(module: torch.nn.Module) -> str:
    """A hash of the module's parameters and buffers as a compiled function depends on them, what their tensor
    guards would check: each one's name, type, shape, strides, dtype, device and requires_grad."""
    parts = [f"{name}:{type(tensor).__name__}:{tuple(tensor.shape)}:{tensor.stride()}:{tensor.dtype}:"
             f"{tensor.device}:{tensor.requires_grad}"
             for name, tensor in [*module.named_parameters(), *module.named_buffers()]]
    return _digest("\n".join(parts))


def _bound(function, module: torch.nn.Module) -> Callable:
    """The compiled function called with the module first. Its guards are checked once, by the load
    (`Precompiled._obtain`) or by the compile that made it: every call that reaches it is of the same kind
    (`call_kind`), so checking every tensor's metadata, the parameters' too, again at each call would add nothing."""
    function.disable_guard_check()

    def call(*args, **kwargs):
        return function(module, *args, **kwargs)
    return call


def _failed_guard(loaded, module: torch.nn.Module, args: tuple, kwargs: dict) -> str:
    """The first guard of a loaded function that this call fails, in Dynamo's words ("" if torch cannot say)."""
    try:   # torch's own diagnosis (not a public API: any failure of it leaves the reason unsaid)
        f_locals = loaded.prepare_f_locals(module, *args, **kwargs)
        parts = loaded._artifacts.guard_manager.check_verbose(f_locals).verbose_code_parts
        return " ".join(str(parts[0]).split())[:300] if parts else ""
    except Exception:   # noqa: BLE001
        return ""


def _forced_eager() -> bool:
    from torch._dynamo import eval_frame  # set_stance's state (no public getter)
    stance = getattr(eval_frame, "_stance", None)
    return getattr(stance, "stance", "default") == "force_eager"


def _source_file(thing) -> str | None:
    try:
        return inspect.getsourcefile(thing)
    except TypeError:   # a builtin
        return None


def _digest(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _first_line(exc: BaseException) -> str:
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__
