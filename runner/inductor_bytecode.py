"""Inductor's generated Python modules loaded from bytecode kept in the compile cache (COSTSIM_INDUCTOR_BYTECODE, on by
default).

Every start that loads a compiled model, from Inductor's caches or from a precompiled file (runner.precompile), loads
its generated modules through `PyCodeCache.load_by_key_path`: the wrappers that call the kernels (the forward's and
the backward's) and, on a GPU, one module per Triton kernel. Torch compiles each from its source with `compile()` at
every start: the import system and its .pyc files are not involved. On an H100, `PyCodeCache.load_by_key_path` took
1.8-2.3 s of each precompiled SDXL start's first step (data/measurements/2026-12-07-h100-preload-indexed, the compile
events' phases). On the CPU, SDXL's blocks at a narrow width: a warm start's loader 2.27 s against 2.95 s, its first
step 0.886x (`scripts/bench_inductor_bytecode.py`, data/measurements/2026-12-07-cpu-inductor-bytecode).

`install` gives torch's loader (`torch._inductor.runtime.compile_tasks._reload_python_module`, the one place that
compiles them) a `compile` that keeps each code object, marshalled, in `<compile cache>/bytecode/`, under a key of the
source and this Python's bytecode magic number (not the file's name: a new node's run folder may be elsewhere; the
code read takes this node's), in runner.precompile's checked format (a SHA-256 of the marshalled bytes that a load
checks first: a damaged file is compiled again and rewritten, never run; written atomically). Torch's loader is
otherwise unchanged: the shadowing is of the builtin's name in that module alone, and only for what it compiles in
"exec" mode. A torch whose loader does not call `compile` is left as it is.

The bytecode is code, as the compile cache it lives in is (Inductor's modules, which the workers import and run): it
is written by the runner itself, and travels to another node only with that cache (runner.compile_share).
"""

from __future__ import annotations

import builtins
import hashlib
import importlib.util
import marshal
import os
import threading
import time
import types
from pathlib import Path

ENV = "COSTSIM_INDUCTOR_BYTECODE"
FOLDER = "bytecode"


class _State:
    def __init__(self):
        self.folder: Path | None = None
        self.lock = threading.Lock()
        self.counts = {"hits": 0, "compiled": 0, "damaged": 0, "unwritten": 0}
        self.seconds = 0.0   # spent in the shadowing compile, hits and misses alike


_state = _State()


def enabled(env=os.environ) -> bool:
    from runner.speed import env_switch  # runner.speed imports this module
    return env_switch(env, ENV, "1", "load Inductor's generated modules from kept bytecode, the default",
                      "compile them from source at every start")


def default_folder(env=os.environ) -> Path:
    """COMPILE_CACHE/bytecode, beside runner.precompile's folder in the run's compile cache."""
    from runner.precompile import default_folder as precompiled
    return precompiled(env).parent / FOLDER


def install(folder: Path) -> bool:
    """Shadow `compile` in torch's module loader with the kept bytecode in `folder` (once a process: a later call
    changes nothing); whether it is on."""
    try:
        from torch._inductor.runtime import compile_tasks
    except ImportError:   # a torch without Inductor
        return False
    loader = getattr(compile_tasks, "_reload_python_module", None)
    if loader is None or "compile" not in getattr(getattr(loader, "__code__", None), "co_names", ()):
        return False
    with _state.lock:
        if _state.folder is None:
            _state.folder = Path(folder)
            setattr(compile_tasks, "compile", kept_compile)   # a module global, found before the builtin
    return True


def report() -> dict:
    """For the compile event: the kept bytecode's hits, compiles (misses), damaged files and files it could not
    write, and the seconds spent loading or compiling through it; {} when it is off."""
    if _state.folder is None:
        return {}
    with _state.lock:
        return {"inductor_bytecode": {**_state.counts, "seconds": round(_state.seconds, 3)}}


def kept_compile(source, filename, mode, *args, **kwargs):
    """`compile` as torch's loader calls it: a code object for `source`, from the kept bytecode if it has one."""
    if mode != "exec" or not isinstance(source, str) or args or _state.folder is None:
        return builtins.compile(source, filename, mode, *args, **kwargs)
    started = time.perf_counter()
    # not keyed by the file name: a new node's run folder (and so the module's path) may differ, and the cache it
    # fetched (runner.compile_share) is to answer it; the code read is given this node's name (tracebacks show it)
    key = hashlib.sha256(b"\0".join((importlib.util.MAGIC_NUMBER, source.encode(),
                                     repr(sorted(kwargs.items())).encode()))).hexdigest()
    path = _state.folder / f"{key[:32]}.bin"
    code, outcome = _read(path), "hits"   # a code object, or None (none kept), or False (damaged)
    if not isinstance(code, types.CodeType):
        outcome = "compiled" if code is None else "damaged"
        code = builtins.compile(source, filename, mode, **kwargs)
        from runner.precompile import keep  # runner.precompile imports runner.speed, which imports this module
        if not keep(path, marshal.dumps(code)):   # checked (a read checks it first), written atomically
            outcome = "unwritten"
    elif code.co_filename != filename:
        code = _renamed(code, os.fsdecode(filename))
    with _state.lock:
        _state.counts[outcome] += 1
        _state.seconds += time.perf_counter() - started
    return code


def _renamed(code: types.CodeType, filename: str) -> types.CodeType:
    """`code`, and every code object it holds (its functions', classes'), with `filename` as theirs."""
    consts = tuple(_renamed(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _read(path: Path):
    """The code object kept at `path`; None if there is none, False if it is damaged."""
    from runner.precompile import read_kept
    payload = read_kept(path)
    if not isinstance(payload, bytes):   # none kept (None), or damaged (False)
        return payload
    try:
        code = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return False
    return code if isinstance(code, types.CodeType) else False
