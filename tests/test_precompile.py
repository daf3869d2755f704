"""runtime.precompile (runner.precompile): the whole model's compiled forward and backward saved in the compile
cache and loaded by the next process, which then traces nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

torch = pytest.importorskip("torch")

from costsim.runtime import Runtime  # noqa: E402
from runner import precompile, speed  # noqa: E402
from tests.runner_helpers import events, execute, summary, tiny_plan  # noqa: E402


class Net(torch.nn.Module):
    """A small model of this module's (the saved function names its class)."""

    def __init__(self, width: int = 16):
        super().__init__()
        self.inner = torch.nn.Linear(8, width)
        self.outer = torch.nn.Linear(width, 4)

    def forward(self, x, scale: float = 1.0):
        return self.outer(torch.nn.functional.gelu(self.inner(x))) * scale


def _net(width: int = 16) -> Net:
    torch.manual_seed(0)
    return Net(width)


def _step(model, x) -> tuple[torch.Tensor, list[torch.Tensor]]:
    out = model(x)
    out.square().mean().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return out.detach(), grads


def test_a_checked_file_gives_back_its_payload_and_a_damaged_one_nothing(tmp_path):
    path = tmp_path / "f.pt"
    precompile.write_checked(path, b"payload bytes")
    data = path.read_bytes()
    assert precompile.checked_payload(data) == b"payload bytes"
    assert [p.name for p in tmp_path.iterdir()] == ["f.pt"]   # the temporary file was renamed
    flipped = data[:-1] + bytes([data[-1] ^ 1])
    assert precompile.checked_payload(flipped) is None                           # a bit flipped
    assert precompile.checked_payload(data[:-3]) is None                         # cut short
    assert precompile.checked_payload(b"\x80\x04 a pickle") is None              # not one of ours


def test_the_files_name_follows_the_code_not_where_it_is_installed(tmp_path, monkeypatch):
    settings = Runtime(compile="model").as_dict()
    key = precompile.artefact_key(_net(), "default", settings)
    source = precompile._source_file(Net)
    moved = tmp_path / "elsewhere" / "test_precompile.py"   # the same code under another install path
    moved.parent.mkdir()
    moved.write_bytes(open(source, "rb").read())
    real = precompile._source_file
    monkeypatch.setattr(precompile, "_source_file", lambda cls: str(moved) if cls is Net else real(cls))
    assert precompile.artefact_key(_net(), "default", settings) == key
    moved.write_bytes(moved.read_bytes() + b"\n# edited\n")   # other code: another file
    assert precompile.artefact_key(_net(), "default", settings) != key


def test_the_files_name_follows_the_model_and_the_settings():
    key = precompile.artefact_key(_net(), "default", Runtime(compile="model").as_dict())
    assert key == precompile.artefact_key(_net(), "default", Runtime(compile="model").as_dict())
    assert key != precompile.artefact_key(_net(32), "default", Runtime(compile="model").as_dict())
    assert key != precompile.artefact_key(_net(), "max-autotune-no-cudagraphs", Runtime(compile="model").as_dict())
    assert key != precompile.artefact_key(_net(), "default", Runtime(compile="model", geglu="split").as_dict())
    kinds = {precompile.call_kind((torch.zeros(2, 8),), {}, True), precompile.call_kind((torch.zeros(3, 8),), {}, True),
             precompile.call_kind((torch.zeros(2, 8),), {}, False),
             precompile.call_kind((torch.zeros(2, 8),), {"scale": 2.0}, True)}
    with torch.no_grad():
        kinds.add(precompile.call_kind((torch.zeros(2, 8),), {}, True))
    assert len(kinds) == 5


@pytest.mark.slow
def test_the_next_process_loads_what_the_first_saved_and_computes_the_same(tmp_path):
    x = torch.randn(5, 8)
    expected, expected_grads = _step(_net(), x)
    model = _net()
    first = precompile.install(model, "default", {"compile": "model"}, tmp_path)
    out, grads = _step(model, x)
    (saved,) = first.report()
    assert saved["op"] == "compile" and saved["bytes"] > 0 and (tmp_path / saved["file"]).is_file()
    assert torch.allclose(out, expected, atol=1e-6) and all(torch.allclose(g, e, atol=1e-6)
                                                             for g, e in zip(grads, expected_grads))
    assert list(model.state_dict()) == list(_net().state_dict())   # the checkpoint's keys are the model's
    # a new model (as a restarted process builds) finds the file and loads it: no compile
    again = _net()
    second = precompile.install(again, "default", {"compile": "model"}, tmp_path)
    out, grads = _step(again, x)
    assert [e["op"] for e in second.report()] == ["load"]
    assert torch.allclose(out, expected, atol=1e-6) and all(torch.allclose(g, e, atol=1e-6)
                                                             for g, e in zip(grads, expected_grads))
    # another kind of call (another batch) gets a file of its own; force_eager (the runner's validation) none
    _step(again, torch.randn(3, 8))
    assert [e["op"] for e in second.report()] == ["load", "compile"] and len(list(tmp_path.glob("*.pt"))) == 2
    with torch.compiler.set_stance("force_eager"), torch.no_grad():
        y = torch.randn(7, 8)
        assert torch.equal(again(y), Net.forward(again, y))   # the eager forward, and no compile for it
    assert len(second.report()) == 2


@pytest.mark.slow
def test_a_file_preloaded_beside_the_start_fits_a_call_under_autocast(tmp_path):
    """The preload's thread runs outside the training step's bf16 autocast: it loads the file under the autocast
    and grad mode the file was compiled in, so the first call takes it as it is (loaded outside autocast, a
    tensor's guard lacked AutocastCPU, and the call had to load the file again)."""
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        eager, eager_grads = _step(_net(), x)
        first = precompile.install(_net(), "default", {"compile": "model"}, tmp_path)
        expected, expected_grads = _step(first.module, x)
    assert [e["op"] for e in first.report()] == ["compile"]
    again = precompile.install(_net(), "default", {"compile": "model"}, tmp_path)
    assert again.preload() == 1
    again._preloading.join()   # loaded before the call, as on a start whose read takes longer than the load
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, grads = _step(again.module, x)
    (event,) = again.report()
    assert event["op"] == "load" and event["preloaded"], again.report()
    # the loaded function is the compiled one, to the bit; the compiled model sums its gradients in another order
    # than eager PyTorch (a bias's gradient differed by 1e-4 for some inputs)
    assert out.dtype == torch.bfloat16 and torch.equal(out, expected)
    assert all(torch.equal(g, e) for g, e in zip(grads, expected_grads))
    assert torch.allclose(out.float(), eager.float(), rtol=1e-2, atol=1e-2)
    assert all(torch.allclose(g, e, rtol=1e-2, atol=1e-3) for g, e in zip(grads, eager_grads))
    # the same file called outside autocast is another kind of call: a file of its own, compiled
    _step(again.module, x)
    assert [e["op"] for e in again.report()] == ["load", "compile"]


@pytest.mark.slow
def test_a_damaged_file_is_compiled_again_never_loaded(tmp_path):
    x = torch.randn(5, 8)
    expected, _ = _step(_net(), x)
    precompile.install(model := _net(), "default", {"compile": "model"}, tmp_path)
    _step(model, x)
    (path,) = tmp_path.glob("*.pt")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    warnings: list[str] = []
    again = precompile.install(_net(), "default", {"compile": "model"}, tmp_path, warn=warnings.append)
    assert again.preload() == 1   # found by the preload, which finds it damaged: the first call compiles
    out, _ = _step(again.module, x)
    assert [e["op"] for e in again.report()] == ["damaged", "compile"]
    assert len(warnings) == 1 and "damaged" in warnings[0] and str(path) in warnings[0]
    assert torch.allclose(out, expected, atol=1e-6)
    assert precompile.checked_payload(path.read_bytes()) is not None   # written afresh


@pytest.mark.slow
def test_a_resumed_ddp_run_loads_the_saved_model_and_ends_as_the_run_straight_through(tmp_path, monkeypatch):
    """Two processes (gloo), compile=model with precompile: the first life compiles the model ahead of time and
    saves it in the run's compile cache; the life after the kill loads it (no trace, preloaded beside the read) and
    the run ends in the same state, bit for bit, as the plain compile=model run straight through; so does the same
    drill without the warm step (the order under CUDA graphs: the first step takes the preloaded model)."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv(precompile.PRELOAD_ENV, "1")   # opt-in (runner.precompile says why)
    plan = tiny_plan(tmp_path, interval_steps=4)
    settings = ("--runtime", "compile=model", "--runtime", "ddp_graph=whole")
    args = ("--steps", "10", "--seed", "3", *settings)
    drill, plain = tmp_path / "drill", tmp_path / "plain"
    cold = tmp_path / "cold"   # a drill without the warm step (as under CUDA graphs): the first step takes the load
    kill = ("--runtime", "precompile=true", "--inject-preemptions", "kill@6")
    for folder, extra in ((drill, kill), (plain, ()), (cold, kill)):
        monkeypatch.setenv("COSTSIM_WARM_STEP", "0" if folder == cold else "1")
        result = execute(plan, folder, *args, *extra, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
    assert summary(drill)["restarts"] == summary(cold)["restarts"] == 1
    assert events(drill, "warm_step") and not events(cold, "warm_step")
    (preloaded,) = events(cold, "compile")[1]["precompiled"]
    assert preloaded["op"] == "load" and preloaded["preloaded"] and preloaded["waited_s"] <= preloaded["duration_s"]
    lives = [c["precompiled"] for c in events(drill, "compile")]
    assert [[e["op"] for e in life] for life in lives] == [["compile"], ["load"]]
    assert lives[1][0]["preloaded"] and lives[1][0]["waited_s"] <= lives[1][0]["duration_s"]   # beside the read
    assert lives[0][0]["file"] == lives[1][0]["file"] and (drill / "compile-cache" / "precompiled" /
                                                           lives[0][0]["file"]).is_file()
    # the loaded life traced nothing: Dynamo captured no frame
    assert "stats.unique_graphs" not in events(drill, "compile")[1]["counters"]
    # and compiled none of Inductor's generated modules from source: the first life kept their bytecode (rank 0's
    # counts: whichever rank loaded a module first compiled and kept it, the other read it)
    kept = [c["inductor_bytecode"] for c in events(drill, "compile")]
    assert kept[0]["compiled"] + kept[0]["hits"] > 0 and any((drill / "compile-cache" / "bytecode").iterdir())
    assert kept[1]["hits"] > 0 and kept[1]["compiled"] == kept[1]["damaged"] == 0
    assert summary(drill)["final_state_sha256"] == summary(plain)["final_state_sha256"] == \
        summary(cold)["final_state_sha256"]
    report = subprocess.run([sys.executable, "-m", "runner", "report", str(drill)], capture_output=True, text=True)
    text = " ".join(report.stdout.split())   # the report wraps its lines
    assert "model compiled ahead of time" in text and "precompiled model loaded" in text
    assert f"generated modules {kept[1]['hits']} from kept bytecode, 0 compiled" in text


class Breaking(Net):
    """A forward with a graph break, which an ahead-of-time compile (whole graph) cannot take."""

    def forward(self, x, scale: float = 1.0):
        hidden = torch.nn.functional.gelu(self.inner(x))
        torch._dynamo.graph_break()
        return self.outer(hidden) * scale


@pytest.mark.slow
@pytest.mark.parametrize("mode, runs_in", [("default", "default"), ("reduce-overhead", "default")])
def test_a_model_it_cannot_compile_ahead_of_time_runs_under_torch_compile_without_cuda_graphs(tmp_path, mode,
                                                                                             runs_in):
    torch.manual_seed(0)
    eager = Breaking()
    x = torch.randn(5, 8)
    expected, expected_grads = _step(eager, x)
    warnings: list[str] = []
    model = Breaking()
    model.load_state_dict(eager.state_dict())
    saved = precompile.install(model, mode, {"compile": "model"}, tmp_path, warn=warnings.append)
    out, grads = _step(model, x)
    (event,) = saved.report()
    assert event["op"] == "fallback" and event["mode"] == runs_in and "graph_break()" in event["reason"]
    assert len(warnings) == 1 and "could not be compiled ahead of time" in warnings[0]
    assert ("no CUDA graphs" in warnings[0]) == (mode != runs_in)
    assert not list(tmp_path.glob("*.pt"))   # nothing saved: the next start tries again
    assert torch.allclose(out, expected, atol=1e-6) and all(torch.allclose(g, e, atol=1e-6)
                                                             for g, e in zip(grads, expected_grads))
    _step(model, x)   # the next call runs the same fallback, without another attempt
    assert len(saved.report()) == 1 and len(warnings) == 1


def test_the_preload_takes_this_models_files_the_most_recently_used_first(tmp_path):
    saved = precompile.install(_net(), "default", {"compile": "model"}, tmp_path)
    assert saved.preload() == 0 and saved._preloading is None   # nothing saved yet
    key, most = saved.model_key(), precompile.PRELOAD_MOST
    names = [f"{key}-{n:016x}.pt" for n in range(most + 1)]
    for age, name in enumerate(names):   # names[0] the newest
        (tmp_path / name).write_bytes(b"not a saved function")
        os.utime(tmp_path / name, (1e9 - age, 1e9 - age))
    (tmp_path / "0123456789abcdef01234567-0000000000000000.pt").write_bytes(b"another model's")
    assert [p.name for p in saved._saved_files()] == names
    os.utime(tmp_path / names[-1])   # loaded just now (as _obtain marks a file it loads)
    assert [p.name for p in saved._saved_files()][0] == names[-1]
    warnings: list[str] = []
    saved.warn = warnings.append
    assert saved.preload() == most
    saved._preloading.join()
    # each one read, found not to be one of ours, and kept from being run: the first call would compile afresh
    assert sorted(saved._preloaded) == sorted([names[-1], *names[:most - 1]])
    assert all(function is None for function, _ in saved._preloaded.values())
    assert len(warnings) == most and all("damaged" in w for w in warnings)
    assert saved.preload() == 0   # once a process


def test_the_preload_switch_takes_0_or_1():
    assert precompile.preload_enabled({precompile.PRELOAD_ENV: "1"})
    assert not precompile.preload_enabled({}) and not precompile.preload_enabled({precompile.PRELOAD_ENV: "0"})
    with pytest.raises(speed.RuntimeConfigError, match="COSTSIM_PRECOMPILE_PRELOAD='yes': expected 1"):
        precompile.preload_enabled({precompile.PRELOAD_ENV: "yes"})


def test_the_tensor_guards_switch_takes_0_or_1():
    assert precompile.tensor_guards_enabled({precompile.TENSOR_GUARDS_ENV: "1"})
    assert not precompile.tensor_guards_enabled({})
    with pytest.raises(speed.RuntimeConfigError, match="COSTSIM_PRECOMPILE_TENSOR_GUARDS='2': expected 1"):
        precompile.tensor_guards_enabled({precompile.TENSOR_GUARDS_ENV: "2"})


def test_the_saved_function_guards_its_inputs_and_the_runner_checks_the_parameters_layout(tmp_path):
    """The file carries no guard on the module's parameters and buffers (torch rebuilds each at every load): a hash
    of their layout in its header stands in for them. A model whose parameter is laid out otherwise (the same shape,
    other strides: a compiled kernel would read it wrongly) compiles again, as a failed guard would; an input unlike
    the compiled one still fails torch's own guard."""
    x = torch.randn(5, 8)
    expected, expected_grads = _step(_net(), x)
    first = precompile.install(_net(), "default", {"compile": "model"}, tmp_path)
    _step(first.module, x)
    (path,) = tmp_path.glob("*.pt")
    state, _ = precompile.unpack(precompile.checked_payload(path.read_bytes()))
    assert state["tensors"] == precompile.tensor_layout(_net())
    kept = precompile.install(_net(), "default", {"compile": "model"}, tmp_path)
    loaded = kept._load(path)
    guards = loaded._artifacts.guard_manager.code_parts   # torch's words for each guard it checks
    assert any("L['args'][0]" in part for part in guards)
    assert not any("_parameters[" in part for part in guards)
    assert loaded.guard_check(kept.module, x) and not loaded.guard_check(kept.module, x.to(torch.float64))
    # with COSTSIM_PRECOMPILE_TENSOR_GUARDS=1 (the choice before) torch guards each parameter: another file
    guarded = precompile.install(_net(), "default", {"compile": "model"}, tmp_path, tensor_guards=True)
    _step(guarded.module, x)
    assert [e["op"] for e in guarded.report()] == ["compile"] and len(list(tmp_path.glob("*.pt"))) == 2
    (other,) = set(tmp_path.glob("*.pt")) - {path}
    with_tensors = guarded._load(other)._artifacts.guard_manager.code_parts
    assert sum(part.startswith("check_tensor(") and "_parameters[" in part for part in with_tensors) == 4   # 2 x 2

    transposed = _net()
    weight = transposed.inner.weight
    weight.data = weight.data.t().contiguous().t()   # the same values and shape, column-major
    assert weight.stride() != _net().inner.weight.stride()
    warnings: list[str] = []
    again = precompile.install(transposed, "default", {"compile": "model"}, tmp_path, warn=warnings.append)
    out, grads = _step(again.module, x)
    assert [e["op"] for e in again.report()] == ["guards failed", "compile"]
    assert "parameters or buffers are not those it was compiled with" in warnings[0]
    assert torch.allclose(out, expected, atol=1e-6) and all(torch.allclose(g, e, atol=1e-6)
                                                             for g, e in zip(grads, expected_grads))


def test_a_file_carries_its_calls_grad_mode_and_autocast_and_the_load_takes_them_on():
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        kind = precompile.call_kind((torch.zeros(2, 8),), {}, True)
    state, function = precompile.unpack(precompile.pack(precompile.kind_state(kind), b"\n torch's bytes"))
    assert function == b"\n torch's bytes" and state["grad"] is False
    seen = {}

    def load():   # a fresh thread, as the preload's: no autocast, grad on
        with precompile.global_state(state):
            seen.update(cpu=torch.is_autocast_enabled("cpu"), dtype=torch.get_autocast_dtype("cpu"),
                        grad=torch.is_grad_enabled(), cuda=torch.is_autocast_enabled("cuda"))
        seen["after"] = torch.is_autocast_enabled("cpu"), torch.is_grad_enabled()
    thread = threading.Thread(target=load)
    thread.start()
    thread.join()
    assert seen == {"cpu": True, "dtype": torch.bfloat16, "grad": False, "cuda": False, "after": (False, True)}
    assert precompile.unpack(None) is None and precompile.unpack(b"torch's bytes, no state line") is None
    assert precompile.unpack(b"[1, 2]\nbytes") is None   # JSON, but not a state


def test_precompile_is_installed_only_for_the_whole_model(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    model = _net()
    assert speed.prepare_model(model, Runtime(compile="model", ddp_graph="whole", precompile=True)) == 1
    assert isinstance(model.__dict__["forward"], precompile.Precompiled)
    installed = model.__dict__["forward"]
    assert installed.folder == tmp_path / "precompiled"
    # the file follows the settings that change the graph, not DDP's buckets or the garbage collector's pace
    assert set(installed.settings) == set(speed.GRAPH_SETTINGS) and installed.settings["compile_mode"] == "default"
    plain = _net()
    speed.prepare_model(plain, Runtime(compile="model"))
    assert not precompile.events(plain) and not isinstance(plain.__dict__.get("forward"), precompile.Precompiled)


def test_the_short_switch_interval_lasts_while_any_holder_needs_it():
    """The warm step and the preload shorten the interpreter's switch interval together: the last to finish puts
    the interval back, whichever order they end in."""
    from runner.warm_step import SWITCH_INTERVAL_S, ShortSwitches
    before = sys.getswitchinterval()
    assert before > SWITCH_INTERVAL_S
    switches = ShortSwitches()
    try:
        switches.acquire()   # the preload
        switches.acquire()   # the warm step
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
        switches.release()   # the preload ends first
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
        switches.release()
        assert sys.getswitchinterval() == pytest.approx(before)
    finally:
        sys.setswitchinterval(before)
