"""The runner's speed settings on CPU: host staging of async checkpoints, settings a model cannot
honour, and a compiled channels-last SDXL UNet (tiny config) that resumes exactly from its
checkpoint and its compile cache after a SIGKILL."""

import pickle
import shutil
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from costsim.runtime import Runtime, parse_pairs  # noqa: E402
from runner import speed  # noqa: E402
from runner.staging import HostStager  # noqa: E402
from tests.runner_helpers import events, execute, summary, tiny_plan  # noqa: E402
from tests.sdxl_tiny import TINY_UNET, sdxl_plan  # noqa: E402


def test_staged_copy_is_a_snapshot_in_reused_buffers():
    state = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "progress": {"step": 3}, "groups": [{"lr": 0.1}]}
    stager = HostStager()
    stager.prepare(state)                       # allocation in the background
    first = stager.stage(state)
    state["model"]["w"].add_(100)               # training goes on after the stall
    assert first["model"]["w"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert first["progress"] == {"step": 3} and first["groups"] == [{"lr": 0.1}]
    second = stager.stage(state)
    assert second["model"]["w"].data_ptr() == first["model"]["w"].data_ptr()   # the same buffer, reused
    assert second["model"]["w"][0, 0].item() == 100


def test_staging_buffers_are_views_of_one_arena_each_a_storage_of_its_own_size():
    from runner.staging import ALIGN_BYTES, host_buffers
    dtypes = (torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.int64, torch.bool)
    state = {"model": {str(d): torch.randn(1000, 3).to(d) for d in dtypes},
             "optim": [torch.zeros(0), torch.ones(5, 7)[:, 1:]], "progress": {"step": 3}}
    buffers = host_buffers(state)
    addresses = []
    for value, buffer in zip([*state["model"].values(), *state["optim"]], [*buffers["model"].values(), *buffers["optim"]]):
        assert buffer.shape == value.shape and buffer.dtype == value.dtype and buffer.is_contiguous()
        assert buffer.untyped_storage().nbytes() == buffer.nbytes   # DCP's writer copies a larger storage
        assert not buffer.float().any()                             # zeroed
        assert torch.equal(buffer.copy_(value).float(), value.float())
        if buffer.numel():
            addresses.append((buffer.data_ptr(), buffer.nbytes))
    assert buffers["progress"] == {"step": None}
    addresses.sort()
    assert all(a % ALIGN_BYTES == 0 for a, _ in addresses)
    assert all(a + n <= b for (a, n), (b, _) in zip(addresses, addresses[1:]))   # none overlaps another


def test_a_copy_right_after_prepare_uses_the_buffers_and_stops_their_touching_first():
    """A notice at a life's second step: the buffers are mapped at prepare() and usable at once (a notice's save
    is staged, not written from the device tensors); the thread faulting them in is stopped before the copy, so
    none of its zeros lands on copied data, and the pages it did not reach fault in as the copy writes them."""
    from runner.staging import PREFAULT_CHUNK_BYTES, HostArena
    arena = HostArena(3 * PREFAULT_CHUNK_BYTES, prefault=False)
    stop = threading.Event()
    stop.set()
    assert arena.prefault(stop) is False and arena.prefaulted() == 0.0   # stopped before its first chunk
    assert arena.prefault() is True and arena.prefaulted() == 1.0
    state = {"model": {f"w{i}": torch.full((PREFAULT_CHUNK_BYTES // 4,), float(i)) for i in range(8)},
             "progress": {"step": 2}}
    for use in ("stage", "planner"):
        stager = HostStager()
        stager.prepare(state)
        assert stager.ready()                       # at once: no wait for the 512 MiB to be touched
        if use == "stage":
            staged = stager.stage(state)
        else:
            planner = stager.planner(state)
            staged = {"model": {k: planner._buffers[f"model.{k}"] for k in state["model"]}}
            for k, v in state["model"].items():
                staged["model"][k].copy_(v)         # as the planner's resolve_data does, tensor by tensor
        assert stager._thread is None               # stopped and waited for
        done = stager.prefaulted()
        for k, v in state["model"].items():
            assert torch.equal(staged["model"][k], v), (use, k)
        time.sleep(0.05)                            # a thread left running would zero some of it by now
        assert stager.prefaulted() == done          # nothing faulted in since the claim
        for k, v in state["model"].items():
            assert torch.equal(staged["model"][k], v), (use, k)
    left = HostStager()
    left.prepare(state)
    left.wait_allocated()                           # nothing claimed it: the thread faults every page in
    assert left.prefaulted() == 1.0 and all(not b.any() for b in left._buffers["model"].values())


def test_staging_survives_a_state_whose_structure_changed():
    stager = HostStager()
    stager.stage({"a": torch.zeros(2)})
    staged = stager.stage({"a": torch.ones(3), "b": torch.ones(1)})
    assert staged["a"].tolist() == [1, 1, 1] and staged["b"].tolist() == [1]


def test_settings_a_model_cannot_honour_are_refused():
    mlp = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with pytest.raises(speed.RuntimeConfigError, match="names no repeated blocks"):
        speed.prepare_model(mlp, Runtime(compile="blocks"))
    with pytest.raises(speed.RuntimeConfigError, match="enable_gradient_checkpointing"):
        speed.prepare_model(mlp, Runtime(activation_checkpointing=True))
    with pytest.raises(speed.RuntimeConfigError, match="needs a CUDA GPU"):
        speed.check_device(Runtime(sdpa="flash"), torch.device("cpu"))


def _tiny_unet():
    import json

    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    return diffusers.UNet2DConditionModel.from_config(json.loads(TINY_UNET.read_text()))


def test_fp8_blocks_converts_the_blocks_linear_layers_and_keeps_the_checkpoint_keys():
    pytest.importorskip("torchao")
    model, reference = _tiny_unet(), _tiny_unet()
    keys = list(model.state_dict())
    names = set(model._repeated_blocks)
    text_side = {id(getattr(m, n)) for m in model.modules() if getattr(m, "is_cross_attention", False)
                 for n in ("to_k", "to_v")}
    assert text_side
    eligible = [m for block in model.modules() if type(block).__name__ in names for m in block.modules()
                if isinstance(m, torch.nn.Linear) and m.in_features % 16 == 0 and m.out_features % 16 == 0
                and id(m) not in text_side]
    outside = sum(isinstance(m, torch.nn.Linear) for m in model.modules()) - len(eligible)
    assert eligible and outside > 0
    assert speed.to_fp8(model, "blocks") == len(eligible)
    assert list(model.state_dict()) == keys                         # checkpoints load either way
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert sum(type(m).__name__ == "Float8Linear" for m in linears) == len(eligible)
    assert sum(type(m) is torch.nn.Linear for m in linears) == outside   # the time embedding etc. stay
    inputs = (torch.randn(2, 4, 16, 16), torch.tensor([10, 500]), torch.randn(2, 7, 64))   # 2 x 7 text tokens
    added = {"added_cond_kwargs": {"text_embeds": torch.randn(2, 32), "time_ids": torch.randn(2, 6)}}
    out, expected = model(*inputs, **added).sample, reference(*inputs, **added).sample
    # e4m3 keeps 3 mantissa bits: per product about 6% relative, averaged down over the sums
    assert 0 < ((out - expected).norm() / expected.norm()).item() < 0.1
    out.square().mean().backward()
    assert all(m.weight.grad is not None and m.weight.grad.abs().sum() > 0 for m in linears
               if type(m).__name__ == "Float8Linear")


def test_geglu_split_computes_the_same_with_the_same_parameters_and_a_copy_uses_its_own():
    import copy

    model, reference = _tiny_unet().double(), _tiny_unet().double()   # float64: only the split's rounding differs
    keys = list(model.state_dict())
    geglus = [m for m in model.modules() if type(m).__name__ == "GEGLU"]
    assert geglus and speed.prepare_model(model, Runtime(geglu="split")) == 0   # nothing compiled
    assert all(type(m).__name__ == "SplitGEGLU" for m in geglus) and list(model.state_dict()) == keys
    # a class of runner.speed's, found by reference: what runtime.precompile's saved function pickles
    assert type(pickle.loads(pickle.dumps(geglus[0]))) is type(geglus[0])
    inputs = (torch.randn(2, 4, 16, 16, dtype=torch.float64), torch.tensor([10, 500]),
              torch.randn(2, 7, 64, dtype=torch.float64))
    added = {"added_cond_kwargs": {"text_embeds": torch.randn(2, 32, dtype=torch.float64),
                                   "time_ids": torch.randn(2, 6, dtype=torch.float64)}}
    out, expected = model(*inputs, **added).sample, reference(*inputs, **added).sample
    assert torch.allclose(out, expected, rtol=1e-10, atol=1e-12)
    out.square().mean().backward()
    expected.square().mean().backward()
    grads = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.allclose(p.grad, grads[name].grad, rtol=1e-8, atol=1e-12), name
    # a deep copy (an EMA's, say) runs the copy's weights, not the original's
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for m in twin.modules():
            if type(m).__name__ == "SplitGEGLU":
                m.proj.weight.zero_()
    assert not torch.allclose(twin(*inputs, **added).sample, out)
    assert torch.allclose(model(*inputs, **added).sample, out)
    with pytest.raises(speed.RuntimeConfigError, match="no GEGLU feed-forward"):
        speed.prepare_model(torch.nn.Sequential(torch.nn.Linear(2, 2)), Runtime(geglu="split"))


def test_fp8_select_large_leaves_the_small_layers_in_their_precision():
    pytest.importorskip("torchao")
    # torchao's tensor-wise threshold: converted when out_features > 4096 or in_features > 1024
    model = torch.nn.Sequential(torch.nn.Linear(1040, 16), torch.nn.Linear(16, 1024), torch.nn.Linear(1024, 4096),
                                torch.nn.Linear(4096, 4112))
    assert speed.to_fp8(model, "model", "large") == 2
    assert [type(m).__name__ for m in model] == ["Float8Linear", "Linear", "Linear", "Float8Linear"]
    with pytest.raises(speed.RuntimeConfigError, match="outside fp8_select=large's small ones"):
        speed.to_fp8(torch.nn.Sequential(torch.nn.Linear(1024, 4096)), "model", "large")
    assert parse_pairs(["fp8=blocks", "fp8_select=large"]).describe() == "fp8=blocks fp8_select=large"


def test_fp8_is_refused_where_it_cannot_run(monkeypatch):
    pytest.importorskip("torchao")
    with pytest.raises(speed.RuntimeConfigError, match="no linear layer with both dimensions divisible by 16"):
        speed.to_fp8(torch.nn.Sequential(torch.nn.Linear(10, 10)), "model")
    with pytest.raises(speed.RuntimeConfigError, match="names no repeated blocks"):
        speed.to_fp8(torch.nn.Sequential(torch.nn.Linear(16, 16)), "blocks")
    monkeypatch.setitem(__import__("sys").modules, "torchao.float8", None)   # as if torchao were not installed
    with pytest.raises(speed.RuntimeConfigError, match=r"needs torchao \(pip install 'costsim\[fp8\]'\)"):
        speed.to_fp8(torch.nn.Sequential(torch.nn.Linear(16, 16)), "model")


@pytest.mark.slow
def test_an_fp8_run_through_the_runner_resumes_exactly(tmp_path):
    # The tiny workload's layers (64, 256, 16 wide) all convert; the kill's resume reaches the same state.
    pytest.importorskip("torchao")
    from tests.runner_helpers import clean_and_killed
    plan = tiny_plan(tmp_path, interval_steps=10)
    _, drill = clean_and_killed(plan, tmp_path, "--steps", "30", "--seed", "6", "--runtime", "fp8=model",
                                kill="kill@17")
    assert [(e["settings"]["fp8"], e["fp8_layers"]) for e in events(drill, "runtime")] == [("model", 3)] * 2
    assert events(drill, "checkpoint_load")[0]["step"] == 10


def test_activation_memory_budget_keeps_fewer_activations_for_the_backward():
    import torch._dynamo

    def saved_bytes(budget: float) -> int:
        speed.configure_backends(Runtime(compile="model", activation_memory_budget=budget))
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(),
                                                          torch.nn.LayerNorm(256)) for _ in range(4)])
        # AOTAutograd's min-cut partitioner, where the budget applies, without Inductor's code generation
        compiled = torch.compile(model, backend="aot_eager_decomp_partition")
        total = 0

        def pack(tensor):
            nonlocal total
            total += tensor.numel() * tensor.element_size()
            return tensor
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            out = compiled(torch.randn(512, 256, requires_grad=True))
        out.sum().backward()
        return total

    try:
        kept, budgeted = saved_bytes(1.0), saved_bytes(0.1)
    finally:
        speed.configure_backends(Runtime())
        torch._dynamo.reset()
    assert budgeted < 0.5 * kept
    import torch._functorch.config as functorch_config
    assert functorch_config.activation_memory_budget == 1.0   # the default is back


class Chain(torch.nn.Module):
    """Four 1 MB layers: four gradient buckets at DDP's 1 MB, one graph each when split."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(512, 512) for _ in range(4)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x).relu()
        return x


@pytest.mark.slow
def test_ddp_graph_splits_a_compiled_model_at_the_buckets_or_keeps_it_whole(tmp_path):
    import torch._dynamo
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    graphs = {}
    try:
        for setting in ("split", "whole"):
            speed.configure_backends(Runtime(compile="model", ddp_graph=setting))
            torch._dynamo.reset()
            compiled = []

            def count(graph, inputs):
                compiled.append(graph)
                return graph.forward

            model = Chain()
            model.compile(backend=count)   # as prepare_model does, before DDP wraps the bare model
            DistributedDataParallel(model, bucket_cap_mb=1)(torch.randn(8, 512)).sum().backward()
            graphs[setting] = len(compiled)
    finally:
        speed.configure_backends(Runtime())
        torch._dynamo.reset()
        dist.destroy_process_group()
    assert graphs == {"split": 4, "whole": 1}
    assert torch._dynamo.config.optimize_ddp == "ddp_optimizer"   # the default is back


def test_channels_last_keeps_the_parameters_the_optimizer_holds():
    conv = torch.nn.Conv2d(3, 4, 3)
    before = [id(p) for p in conv.parameters()]
    speed.prepare_model(conv, Runtime(channels_last=True))
    assert [id(p) for p in conv.parameters()] == before
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.slow
def test_compiled_run_resumes_exactly_and_restarts_from_its_compile_cache(tmp_path, monkeypatch):
    # Inductor sets TORCHINDUCTOR_CACHE_DIR in its own process once it has compiled anything, and a
    # user's value wins over the run folder's: the workers must not inherit this process's.
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("COSTSIM_READ_BATCHED", "always")   # the batched read on CPU, beside the warm step
    plan = sdxl_plan(tmp_path, runtime={"compile": "blocks", "channels_last": True})
    args = ("--option", f"config={TINY_UNET}", "--steps", "8", "--seed", "4")
    drill, clean = tmp_path / "drill", tmp_path / "clean"
    result = execute(plan, drill, *args, "--inject-preemptions", "kill@4,kill@6", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    starts = events(drill, "runtime")
    assert [e["settings"]["compile"] for e in starts] == ["blocks"] * 3 and starts[0]["compiled_modules"] > 0
    assert starts[0]["compile_cache_bytes"] == 0 < starts[1]["compile_cache_bytes"]   # the restart finds the cache
    assert (drill / "compile-cache").is_dir() and summary(drill)["restarts"] == 2
    # runner.warm_step: each resume ran its first micro-batch beside the checkpoint's read (two processes: the
    # bare module inside DDP's marker), and its first step then traced and compiled nothing more (the compile
    # counters after it are the warm step's: no new frame, graph, cache lookup or recompile)
    warmed, compiled = events(drill, "warm_step"), events(drill, "compile")
    assert [w["step"] for w in warmed] == [4, 4] and not any("error" in w for w in warmed)
    assert all(w["started_after_s"] >= 0 and w["seconds"] > 0 and w["started_at"] == "read" for w in warmed)
    assert [c["counters"] for c in compiled[1:]] == [w["counters"] for w in warmed]
    assert warmed[0]["counters"]["stats.unique_graphs"] > 0 and not any("miss" in k for k in warmed[1]["counters"])
    assert not events(drill, "prewarm")   # the warm step imports what it needs itself
    # The run straight through, on the drill's cache (a user's TORCHINDUCTOR_CACHE_DIR wins over the run
    # folder's): it compiles nothing cold, and ends in the same state as the killed and resumed run.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(drill / "compile-cache"))
    result = execute(plan, clean, *args, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert events(clean, "runtime")[0]["compile_cache_bytes"] > 0
    assert summary(clean)["final_state_sha256"] == summary(drill)["final_state_sha256"]


@pytest.mark.slow
def test_a_resume_that_compiled_records_no_imports_to_prewarm(tmp_path, monkeypatch):
    """runner.prewarm records a resume's first-step imports only when that step compiled nothing: a resume
    whose compile cache is gone compiles, importing the compiler too; the next resume, from a warm cache,
    records its own list."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("COSTSIM_WARM_STEP", "0")   # runner.warm_step off: the resumes import the list instead
    plan = tiny_plan(tmp_path, interval_steps=10)
    run = tmp_path / "run"
    args = ("--nproc-per-node", "1", "--runtime", "compile=model", "--seed", "2")
    first = execute(plan, run, "--steps", "20", *args, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    shutil.rmtree(run / "compile-cache")   # gone: the next start compiles again
    cold = execute(plan, run, "--steps", "30", *args, timeout=600)
    warm = execute(plan, run, "--steps", "40", *args, timeout=600)
    assert cold.returncode == 0 and warm.returncode == 0, cold.stderr[-3000:] + warm.stderr[-3000:]
    misses = [sum(v for k, v in e["counters"].items() if "miss" in k) for e in events(run, "compile")]
    assert misses[0] > 0 and misses[1] > 0 and misses[2] == 0   # fresh, then the cold resume, then a warm one
    (recorded,) = events(run, "prewarm")   # the warm resume's alone
    assert recorded["step"] == 31 and recorded["recorded"] > 0
    again = execute(plan, run, "--steps", "50", *args, timeout=600)   # imports the list beside its read
    assert again.returncode == 0, again.stderr[-3000:]
    warmed = events(run, "prewarm")[-1]
    assert warmed["modules"] == recorded["recorded"] and warmed["failed"] == 0 and warmed["seconds"] >= 0


@pytest.mark.slow
def test_the_warm_step_started_early_resumes_exactly(tmp_path, monkeypatch):
    """COSTSIM_WARM_STEP=early: the warm step starts at the restore's start, beside sizing the optimizer's state
    (a zero-learning-rate step on zero gradients) and the read, on the batched path; the resumed run ends as
    the run straight through, and its first step after the warm step compiled nothing more. A value it does not
    know stops the run with one line."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("COSTSIM_READ_BATCHED", "always")
    plan = tiny_plan(tmp_path, interval_steps=10)
    args = ("--nproc-per-node", "1", "--runtime", "compile=model", "--seed", "3", "--steps", "30")
    monkeypatch.setenv("COSTSIM_WARM_STEP", "early")
    drill = execute(plan, tmp_path / "drill", *args, "--inject-preemptions", "kill@15", timeout=600)
    assert drill.returncode == 0, drill.stderr[-3000:]
    (warmed,) = events(tmp_path / "drill", "warm_step")
    assert warmed["started_at"] == "restore" and warmed["step"] == 10 and "error" not in warmed
    assert events(tmp_path / "drill", "compile")[-1]["counters"] == warmed["counters"]
    monkeypatch.setenv("COSTSIM_WARM_STEP", "0")
    clean = execute(plan, tmp_path / "clean", *args, timeout=600)
    assert clean.returncode == 0, clean.stderr[-3000:]
    assert summary(tmp_path / "clean")["final_state_sha256"] == summary(tmp_path / "drill")["final_state_sha256"]
    monkeypatch.setenv("COSTSIM_WARM_STEP", "soon")
    bad = execute(plan, tmp_path / "drill", *args, "--steps", "40", timeout=600)
    assert bad.returncode == 2 and "COSTSIM_WARM_STEP='soon': expected 1 (beside the read, the default), early" \
        in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("setting, message", [("sdpa=flash", "runtime.sdpa=flash needs a CUDA GPU"),
                                              ("ddp_comm=bf16", "runtime.ddp_comm=bf16 needs CUDA GPUs"),
                                              ("compile_mode=reduce-overhead",
                                               "runtime.compile_mode=reduce-overhead uses CUDA graphs")])
def test_a_setting_the_device_cannot_honour_stops_without_restarts(tmp_path, setting, message):
    plan = tiny_plan(tmp_path)
    result = execute(plan, tmp_path / "run", "--steps", "5", "--runtime", setting)
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr
    assert "Traceback" not in result.stderr   # torchrun's own report of the stopped workers is left out
    assert summary(tmp_path / "run")["restarts"] == 0


def test_a_bad_runtime_flag_is_one_line_before_anything_starts(tmp_path):
    plan = tiny_plan(tmp_path)
    result = execute(plan, tmp_path / "run", "--runtime", "compile=fast")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "runtime.compile" in lines[0] and "off, blocks, model" in lines[0], result.stderr
    assert not (tmp_path / "run" / "telemetry.jsonl").exists()


def test_controlled_garbage_collection_runs_only_every_n_steps_and_restores_the_collector():
    import gc
    collector = speed.GarbageCollection(every=3)
    try:
        assert not gc.isenabled()
        after_init = collector.collections
        assert after_init >= 1                     # the initial full collection, timed
        collector.step(1)
        collector.step(2)
        assert collector.collections == after_init
        collector.step(3)
        assert collector.collections == after_init + 1 and collector.seconds > 0
    finally:
        collector.close()
    assert gc.isenabled()


GC_START_PROBE = r"""
import gc, json, os, sys, weakref
from runner import gcstart, speed
gcstart.pause()
paused = not gc.isenabled()
child = os.fork()                     # a data loader's worker, say: its own process, collecting as Python does
if child == 0:
    os._exit(0 if gc.isenabled() and not gcstart.paused() else 1)
child_collects = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0
gcstart.freeze()                      # what "the imports" made: out of every later collection
frozen_before = gc.get_freeze_count()
class Node:
    pass
node = Node()
node.me = node                        # a cycle the start made and dropped
dropped = weakref.ref(node)
del node
collector = speed.GarbageCollection(every=int(sys.argv[1]))
kept_through_start = dropped() is not None
report = collector.settle()
print(json.dumps({"paused": paused, "child_collects": child_collects, "kept_through_start": kept_through_start,
                  "freed": dropped() is None,
                  "report": report, "frozen_before": frozen_before, "enabled": gc.isenabled(),
                  "collections": collector.collections, "again": collector.settle()}))
"""


@pytest.mark.parametrize("every", [0, 5])
def test_a_start_runs_without_automatic_collection_and_its_end_collects_once_and_freezes(every, monkeypatch):
    """runner.gcstart in a fresh interpreter (the collector is the process's): paused, nothing collects a cycle the
    start dropped; settle() collects it, freezes the rest and turns automatic collection back on, unless gc_every
    keeps it off (its own young collections every N steps); once. A process forked during the pause collects as
    Python does. COSTSIM_GC_START=0 changes nothing."""
    import json
    import subprocess
    import sys
    probe = [sys.executable, "-c", GC_START_PROBE, str(every)]
    monkeypatch.delenv("COSTSIM_GC_START", raising=False)
    out = json.loads(subprocess.run(probe, capture_output=True, text=True, check=True).stdout)
    assert out["paused"] and out["child_collects"] and out["kept_through_start"] and out["freed"]
    report = out["report"]
    assert report["freed"] >= 1 and report["collected_s"] >= 0 and report["paused_s"] >= 0
    assert report["frozen"] > out["frozen_before"] > 0   # the imports' objects, then what the start kept
    assert out["enabled"] == (every == 0) and out["collections"] >= 1 and out["again"] is None
    monkeypatch.setenv("COSTSIM_GC_START", "0")
    out = json.loads(subprocess.run(probe, capture_output=True, text=True, check=True).stdout)
    assert not out["paused"] and out["report"] is None and out["frozen_before"] == 0
    assert out["enabled"] == (every == 0)   # gc_every's own rule, as before


def test_worker_env_sets_the_allocator_and_compile_cache_but_a_users_own_values_win(tmp_path):
    from runner.workerenv import worker_env

    env = worker_env(Runtime(expandable_segments=True, compile="blocks"), tmp_path, {})
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path.resolve() / "compile-cache")
    mine = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512", "TORCHINDUCTOR_CACHE_DIR": "/shared/cache"}
    assert worker_env(Runtime(expandable_segments=True, compile="blocks"), tmp_path, dict(mine)) == {
        **mine, "TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}
    assert worker_env(Runtime(), tmp_path, {}) == {}
    tuned = worker_env(Runtime(compile="model", coordinate_descent_tuning=True), tmp_path, {})
    assert tuned["TORCHINDUCTOR_COORDINATE_DESCENT_TUNING"] == "1"
    assert "TORCHINDUCTOR_COORDINATE_DESCENT_TUNING" not in worker_env(Runtime(compile="model"), tmp_path, {})


def test_a_blocking_save_writes_the_staged_copy_once_the_buffers_exist(tmp_path):
    """The notice's save in async mode: written from the tensors while the staging buffers are still
    being allocated (it does not wait for them), from the staged copy once they exist; both load back
    to the state as it was at the save."""
    from runner.checkpoint import Checkpointer
    saves = []
    checkpointer = Checkpointer(tmp_path, keep=3, async_mode=True, rank=0, warn=print,
                                on_event=lambda name, **f: saves.append(f) if name == "checkpoint_save" else None)
    assert checkpointer.agree_on_step() == 0    # as the trainer does first: nothing to resume (and no stale folder)
    state = {"model": {"w": torch.arange(4.0)}, "progress": {"step": 1}}
    checkpointer.save(1, state, blocking=True, reason="notice")
    checkpointer.prepare(state)
    checkpointer.wait_staging()
    state["model"]["w"].add_(10)
    checkpointer.save(2, state, blocking=True, reason="notice")
    checkpointer.save(3, state, blocking=True, reason="final", stage=False)
    assert [(s["step"], s["staged"], s["mode"]) for s in saves] == [(1, False, "sync"), (2, True, "sync"),
                                                                    (3, False, "sync")]
    for step, expected in ((1, [0, 1, 2, 3]), (2, [10, 11, 12, 13])):
        loaded = {"model": {"w": torch.zeros(4)}, "progress": {"step": 0}}
        checkpointer.load(step, loaded)
        assert loaded["model"]["w"].tolist() == expected and loaded["progress"]["step"] == 1
    checkpointer.close()


def test_a_compile_report_says_what_compiling_did_and_what_the_cache_answered():
    """After a compiled call, the report counts Dynamo's frames and graphs and times its phases; a second
    call of the same shapes compiles nothing more (what a warm start should look like)."""
    torch._dynamo.reset()
    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), backend="eager")
    model(torch.randn(2, 4)).sum().backward()
    first = speed.compile_report()
    assert first["counters"]["frames.total"] >= 1 and first["counters"]["stats.unique_graphs"] >= 1
    assert first["phases_s"] and all(v >= 0 for v in first["phases_s"].values())
    model(torch.randn(2, 4)).sum().backward()
    assert speed.compile_report()["counters"]["frames.total"] == first["counters"]["frames.total"]
    torch._dynamo.reset()


def test_workers_keep_their_bytecode_in_the_run_folder_where_python_writes_none(tmp_path):
    """PYTHONDONTWRITEBYTECODE and an installation without .pyc (as on the H200 host: every start compiled
    torch and diffusers from source): the workers write theirs under RUN/pycache and the next start reads
    it. With bytecode in the installation, or the user's own prefix, nothing changes."""
    import importlib
    import subprocess
    import sys

    from runner.workerenv import bytecode_env
    package = tmp_path / "lib" / "slowpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 42\n")
    sys.path.insert(0, str(tmp_path / "lib"))
    try:
        importlib.invalidate_caches()
        env = bytecode_env(tmp_path / "run", {"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin"}, probe="slowpkg")
    finally:
        sys.path.remove(str(tmp_path / "lib"))
    assert "PYTHONDONTWRITEBYTECODE" not in env and env["PYTHONPYCACHEPREFIX"] == str((tmp_path / "run" / "pycache"))
    imported = subprocess.run([sys.executable, "-c", "import slowpkg; print(slowpkg.VALUE)"], capture_output=True,
                              text=True, env={**env, "PYTHONPATH": str(tmp_path / "lib")})
    assert imported.stdout.strip() == "42", imported.stderr
    assert list((tmp_path / "run" / "pycache").rglob("__init__*.pyc"))            # kept in the run folder
    assert not (package / "__pycache__").exists()                                  # not in the installation
    assert bytecode_env(tmp_path, {"PYTHONDONTWRITEBYTECODE": "1"}) == {"PYTHONDONTWRITEBYTECODE": "1"}  # torch has .pyc
    mine = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "/mine"}
    assert bytecode_env(tmp_path, dict(mine), probe="slowpkg") == mine
    assert bytecode_env(tmp_path, {}, probe="slowpkg") == {}


class _StaticGradient(torch.autograd.Function):
    """y = w * x whose backward returns dw in one buffer it overwrites at every call, as a backward replayed as a
    CUDA graph returns its outputs in the graph's own memory."""

    buffer: torch.Tensor | None = None

    @staticmethod
    def forward(ctx, w, x):
        ctx.save_for_backward(x)
        return w * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        if _StaticGradient.buffer is None:
            _StaticGradient.buffer = torch.empty_like(x)
        _StaticGradient.buffer.copy_(grad * x)
        return _StaticGradient.buffer.view_as(x), None   # a fresh handle on the reused memory, as the graph's


@pytest.mark.parametrize("keep", [False, True])
def test_gradients_kept_under_cuda_graphs_accumulate_what_each_micro_batch_gave(keep):
    """`keep`: zeroed in place and made where missing (clear_grads' in_place and make, the runner's under CUDA graphs
    with accumulation); else dropped."""
    from runner.train import clear_grads
    w = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([w], lr=0.1)
    micro_batches = (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0, 30.0]))
    for _ in range(2):   # two steps: the kept gradient is zeroed in place between them
        _StaticGradient.buffer = None
        clear_grads(optimizer, in_place=keep, make=keep)
        if keep:
            assert w.grad is not None and w.grad.abs().sum().item() == 0.0
        else:
            assert w.grad is None
        for x in micro_batches:
            _StaticGradient.apply(w, x).sum().backward()
        accumulated = w.grad.tolist()
        if keep:
            assert accumulated == [11.0, 22.0, 33.0]
        else:   # the first micro-batch's gradient was the buffer itself, overwritten by the second's replay
            assert accumulated == [20.0, 40.0, 60.0]


def two_gloo_ranks(script: str, tmp_path) -> list[str]:
    """`script` run as ranks 0 and 1 of a gloo group (its argv: the rank, then a FileStore path), from the repository
    root; each rank's standard output, once both exited 0."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    procs = [subprocess.Popen([sys.executable, "-c", script, str(rank), str(tmp_path / "store")], cwd=root,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outs = [proc.communicate(timeout=120) for proc in procs]
    for proc, (_, err) in zip(procs, outs):
        assert proc.returncode == 0, err
    return [out for out, _ in outs]


KEPT_UNDER_DDP = """
import sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from runner.train import clear_grads
rank, store = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
finals, views = [], []
for in_place, make in ((False, False), (True, False), (True, True)):   # dropped; DDP's way; under CUDA graphs
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)),
                                    gradient_as_bucket_view=True, bucket_cap_mb=0.0001)   # several buckets
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(rank)
    buckets, stayed = {}, True
    for step in range(3):
        clear_grads(optimizer, in_place=in_place, make=make)
        for micro in range(2):   # accumulation, the runner's way: no all-reduce but on the last micro-batch
            x = torch.randn(4, 8, generator=data)
            with (model.no_sync() if micro == 0 else torch.enable_grad()):
                (model(x).pow(2).mean() / 2).backward()
            if micro == 0 and step > 1:   # a later step's first backward: into the buckets, or beside them? (DDP
                # rebuilds its buckets in the order the first step's gradients came: the second step's are its own)
                stayed &= all(p.grad.data_ptr() == buckets[i] for i, p in enumerate(model.parameters()))
        buckets = {i: p.grad.data_ptr() for i, p in enumerate(model.parameters())}   # views of them after a step
        optimizer.step()
    finals.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    views.append(stayed)
same = all(torch.equal(finals[0], f) for f in finals[1:])
print("same" if same else f"differ by {max((finals[0] - f).abs().max().item() for f in finals[1:])}", *views)
dist.destroy_process_group()
"""


def test_gradients_zeroed_in_place_under_ddp_stay_its_bucket_views_and_train_as_dropped_ones(tmp_path):
    """The runner's DDP keeps gradients as views of its buckets (gradient_as_bucket_view). Dropped each step, every
    step's first backward allocated them beside the buckets (10.3 GB a GPU for SDXL); zeroed in place (clear_grads'
    in_place, the runner's under DDP; with make, under CUDA graphs with accumulation) that backward accumulates into
    the buckets. Two gloo processes, three steps of two micro-batches each (the first without the all-reduce): the
    parameters come out bit for bit the same all three ways, and only the in-place ways keep the buckets."""
    for out in two_gloo_ranks(KEPT_UNDER_DDP, tmp_path):
        assert out.split() == ["same", "False", "True", "True"], out


BUCKETS_AT_WRAP = """
import sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from costsim.runtime import Runtime
from runner import speed
from runner.train import clear_grads
rank, store = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
finals = []
for runtime in (Runtime(compile="blocks", ddp_graph="whole"), Runtime(compile="model", ddp_graph="whole")):
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)),
                                    gradient_as_bucket_view=True, bucket_cap_mb=0.0001)   # several buckets
    speed.configure_ddp(model, runtime)   # compiles nothing: the buckets are what is looked at
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(rank)
    storages = []
    for step in range(3):
        clear_grads(optimizer, in_place=True)
        for micro in range(2):
            x = torch.randn(4, 8, generator=data)
            with (model.no_sync() if micro == 0 else torch.enable_grad()):
                (model(x).pow(2).mean() / 2).backward()
        storages.append(sorted({p.grad.untyped_storage().data_ptr() for p in model.parameters()}))
        optimizer.step()
    finals.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    print(len(storages[0]), len(storages[1]), storages[1] == storages[2])
print("same" if torch.equal(finals[0], finals[1]) else f"differ by {(finals[0] - finals[1]).abs().max().item()}")
dist.destroy_process_group()
"""


def test_ddp_buckets_are_made_at_the_wrap_when_the_whole_model_is_one_graph(tmp_path):
    """runner.speed.buckets_now: DDP holds every gradient in one bucket for its first step and rebuilds sized buckets
    at the second, copying the gradients across (held twice at that moment: 10.3 GB under CUDA graphs on an H100).
    Under compile=model ddp_graph=whole the buckets are made at the wrap instead: the first step's gradients already lie
    in sized buckets, and stay in them (no rebuild); under compile=blocks torch's way stays (one bucket, then sized
    ones). Two gloo processes, three steps of two micro-batches: the parameters come out bit for bit the same."""
    for out in two_gloo_ranks(BUCKETS_AT_WRAP, tmp_path):
        lines = out.splitlines()
        torch_way, at_wrap = ([int(n) for n in line.split()[:2]] for line in lines[:2])
        assert torch_way[0] == 1 and torch_way[1] > 1, out   # one bucket for the first step, then the sized ones
        assert at_wrap[0] == at_wrap[1] > 1, out             # the sized ones from the first step on
        assert lines[1].endswith(" True") and lines[2] == "same", out


FIRST_STEP_OF_A_LIFE = """
import sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from runner.state import make_optimizer_state
from runner.train import clear_grads, grads_for_buckets
rank, store = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
finals = []
for before in (False, True):
    torch.manual_seed(0)
    bare = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(bare.parameters(), lr=0.01)
    make_optimizer_state(optimizer)   # a resumed life: the state is there before the first step
    if before:
        grads_for_buckets(bare)
    model = DistributedDataParallel(bare, gradient_as_bucket_view=True, bucket_cap_mb=0.0001)
    data = torch.Generator().manual_seed(rank)
    first, kept = [], []
    for step in range(2):
        clear_grads(optimizer, in_place=True)
        for micro in range(2):
            x = torch.randn(4, 8, generator=data)
            with (model.no_sync() if micro == 0 else torch.enable_grad()):
                (model(x).pow(2).mean() / 2).backward()
            if micro == 0:   # before the step's all-reduce: in the buckets already, or beside them?
                first.append({p.grad.untyped_storage().data_ptr() for p in model.parameters()})
        kept.append({p.grad.untyped_storage().data_ptr() for p in model.parameters()})   # the buckets, after it
        optimizer.step()
    finals.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    print(len(first[0]), first[0] == kept[0])
print("same" if torch.equal(finals[0], finals[1]) else f"differ by {(finals[0] - finals[1]).abs().max().item()}")
dist.destroy_process_group()
"""


def test_a_lifes_first_step_accumulates_into_ddps_buckets(tmp_path):
    """runner.train.grads_for_buckets: zero gradients made before DDP wraps the model become views of its buckets at
    the wrap. Without them a life's first backward allocates the gradients beside the buckets until that step's
    all-reduce; a resumed life has its optimizer state by then, so that was the gradients' size above the steady peak
    (10.3 GB for SDXL). Two gloo processes, the optimizer state made first as a resume makes it: without, the first
    micro-batch's gradients lie in one storage each (four parameters); with, they lie in the buckets the step ends
    with; the parameters come out bit for bit the same."""
    for out in two_gloo_ranks(FIRST_STEP_OF_A_LIFE, tmp_path):
        without, with_, same = out.splitlines()
        assert without == "4 False", out
        assert with_.endswith(" True") and int(with_.split()[0]) < 4, out
        assert same == "same", out


def test_ddp_at_one_process_trains_as_the_bare_model(tmp_path):
    """scripts/bench_sdxl.py runner --ddp (runner.train.Trainer's `ddp`): the tiny SDXL UNet in DDP at world size 1,
    gradients accumulated over two micro-batches (DDP's no_sync on the first), steps to the same loss as the bare
    model, bit for bit; each row says which it ran."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    results = tmp_path / "rows.jsonl"
    for extra in ([], ["--ddp"]):
        run = subprocess.run([sys.executable, str(root / "scripts" / "bench_sdxl.py"), "runner", "--batch", "1",
                              "--accumulation", "2", "--steps", "2", "--warmup", "1", "--config", str(TINY_UNET),
                              "--results", str(results), *extra], cwd=tmp_path, capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
    bare, ddp = [json.loads(line) for line in results.read_text().splitlines()]
    assert (bare["ddp"], ddp["ddp"]) == (False, True) and ddp["label"].endswith(" ddp")
    assert (bare["ddp_buckets"], ddp["ddp_buckets"]) == (None, "rebuilt")   # eager: torch's way
    assert isinstance(bare["loss"], float) and bare["loss"] == ddp["loss"]


def test_the_cuda_graph_step_marking_is_a_named_setting(tmp_path, monkeypatch):
    """COSTSIM_GRAPH_STEPS (where a new CUDA-graph step begins, to measure beside torch's own tracking): auto or
    micro, and anything else stops the start with one line, GPU or not."""
    from runner.train import graph_steps
    assert graph_steps({}) == "auto" and graph_steps({"COSTSIM_GRAPH_STEPS": "micro"}) == "micro"
    plan = tiny_plan(tmp_path)
    monkeypatch.setenv("COSTSIM_GRAPH_STEPS", "always")
    bad = execute(plan, tmp_path / "run", "--steps", "5")
    lines = [x for x in bad.stderr.splitlines() if x.strip()]
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr[-3000:]
    assert any("COSTSIM_GRAPH_STEPS='always': expected auto" in x for x in lines), bad.stderr[-3000:]
    monkeypatch.setenv("COSTSIM_GRAPH_STEPS", "micro")   # no graphs on a CPU: nothing to mark, the run as ever
    good = execute(plan, tmp_path / "good", "--steps", "5")
    assert good.returncode == 0, good.stderr[-3000:]
