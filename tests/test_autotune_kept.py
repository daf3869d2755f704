"""runner.autotune_kept: a kernel's autotuning timings, kept by one start, are handed back at the next instead of
timing its candidates again; only for the same kernel, candidates and hardware; a damaged file or one kept for other
candidates is timed again, never trusted.

Torch's autotuner (Inductor's CachingAutotuner) times Triton kernels, which need a GPU: here the Keeper wraps the
timing method of `Autotuner`, which has what the Keeper reads of torch's (a kernel file name, launchers with a
config, a benchmark_all_configs that returns {launcher: ms}) and counts its timings. `install` is checked against
torch's own class. On a GPU, `AB_ENV=COSTSIM_KEPT_AUTOTUNE scripts/gpu_switch_ab.sh` runs the real thing."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")   # the runner's extra

from runner import autotune_kept  # noqa: E402
from runner.precompile import write_checked  # noqa: E402
from runner.speed import RuntimeConfigError  # noqa: E402
from tests.runner_helpers import execute, tiny_plan  # noqa: E402


class Launcher:
    def __init__(self, config: str):
        self.config = config


class Autotuner:
    """A kernel with candidates; its timing (benchmark_all_configs) counted and given from `times`."""

    def __init__(self, configs, times, filename="/cache/ab/cabc123.py"):
        self.filename = filename
        self.launchers = [Launcher(c) for c in configs]
        self.times = times
        self.timed = 0
        self.zeroed: list = []   # torch's timing ends by zeroing the arguments the kernel accumulates into
        self.coordesc_tuner = Tuner()

    def benchmark_all_configs(self, *args, **kwargs):
        self.timed += 1
        timings = {launcher: ms for launcher, ms in zip(self.launchers, self.times)}
        for launcher, ms in timings.items():
            self.coordesc_tuner.cache_benchmark_result(launcher.config, ms)
        self.reset_to_zero_args(*args, **kwargs)
        return timings

    def reset_to_zero_args(self, *args, **kwargs):
        self.zeroed.append((args, kwargs))


class Tuner:
    def __init__(self):
        self.cached: dict = {}

    def cache_benchmark_result(self, config, ms):
        self.cached[config] = ms


CONFIGS = ["XBLOCK: 64, num_warps: 4, num_stages: 1", "XBLOCK: 128, num_warps: 4, num_stages: 1",
           "XBLOCK: 256, num_warps: 8, num_stages: 1"]


def start(folder, device="NVIDIA H100|torch 2.11"):
    """A process's keeper, wrapped around the autotuner's timing."""
    keeper = autotune_kept.Keeper(folder, device)
    return keeper, keeper.wrap(Autotuner.benchmark_all_configs)


def counts(keeper) -> dict:
    return {k: v for k, v in keeper.report()["kept_autotune"].items() if v and k != "seconds"}


def fastest(timings) -> str:
    return min(timings, key=timings.get).config


def test_the_next_start_takes_the_kept_timings_instead_of_timing(tmp_path):
    keeper, bench = start(tmp_path)
    kernel = Autotuner(CONFIGS, [0.30, 0.12, 0.50])
    first = bench(kernel, "args")
    assert kernel.timed == 1 and fastest(first) == CONFIGS[1] and counts(keeper) == {"timed": 1}
    (file,) = tmp_path.iterdir()
    again, bench = start(tmp_path)   # a restart: a new process, the same kernel loaded again
    reloaded = Autotuner(CONFIGS, [9.0, 9.0, 0.01])   # it would choose otherwise if it timed
    timings = bench(reloaded, "args", stream=7)
    assert reloaded.timed == 0 and counts(again) == {"kept": 1}
    # and left what torch's timing leaves: the accumulated-into arguments zeroed, the tuner's cache filled
    assert reloaded.zeroed == [(("args",), {"stream": 7})] and reloaded.coordesc_tuner.cached == kernel.coordesc_tuner.cached
    assert fastest(timings) == CONFIGS[1]
    assert {launcher.config: ms for launcher, ms in timings.items()} == dict(zip(CONFIGS, [0.30, 0.12, 0.50]))
    assert set(timings) == set(reloaded.launchers)   # this kernel's launchers, which torch picks from
    assert list(tmp_path.iterdir()) == [file]


def test_other_hardware_other_candidates_or_another_kernel_time_again(tmp_path):
    _, bench = start(tmp_path)
    bench(Autotuner(CONFIGS, [0.30, 0.12, 0.50]))
    for device, kernel in [("NVIDIA H200|torch 2.11", Autotuner(CONFIGS, [0.2, 0.3, 0.1])),
                           ("NVIDIA H100|torch 2.11", Autotuner(CONFIGS[:2], [0.2, 0.3])),
                           ("NVIDIA H100|torch 2.11", Autotuner(CONFIGS, [0.2, 0.3, 0.1], filename="/c/cdef.py"))]:
        keeper, bench = start(tmp_path, device)
        timings = bench(kernel)
        assert kernel.timed == 1 and counts(keeper) == {"timed": 1} and fastest(timings) == kernel.launchers[
            kernel.times.index(min(kernel.times))].config
    assert len(list(tmp_path.iterdir())) == 4


def test_a_damaged_file_is_timed_again_and_rewritten(tmp_path):
    _, bench = start(tmp_path)
    bench(Autotuner(CONFIGS, [0.30, 0.12, 0.50]))
    (file,) = tmp_path.iterdir()
    data = bytearray(file.read_bytes())
    data[-3] ^= 0x01   # one bit of the timings: the checksum no longer matches
    file.write_bytes(bytes(data))
    keeper, bench = start(tmp_path)
    kernel = Autotuner(CONFIGS, [0.30, 0.50, 0.05])
    assert fastest(bench(kernel)) == CONFIGS[2] and kernel.timed == 1 and counts(keeper) == {"damaged": 1}
    keeper, bench = start(tmp_path)
    kernel = Autotuner(CONFIGS, [1.0, 1.0, 1.0])
    assert fastest(bench(kernel)) == CONFIGS[2] and kernel.timed == 0 and counts(keeper) == {"kept": 1}


@pytest.mark.parametrize("content", [
    b'{"XBLOCK: 64, num_warps: 4, num_stages: 1": 0.1}',   # timings for other candidates
    b'{"XBLOCK: 64, num_warps: 4, num_stages: 1": "os.system", "XBLOCK: 128, num_warps: 4, num_stages: 1": 1, '
    b'"XBLOCK: 256, num_warps: 8, num_stages: 1": 2}',   # not a number
    b'{"XBLOCK: 64, num_warps: 4, num_stages: 1": true, "XBLOCK: 128, num_warps: 4, num_stages: 1": 1, '
    b'"XBLOCK: 256, num_warps: 8, num_stages: 1": 2}',
    b"[0.1, 0.2, 0.3]", b"\xff\xfe not json"])
def test_a_checked_file_that_is_not_this_kernels_timings_is_not_trusted(tmp_path, content):
    _, bench = start(tmp_path)
    bench(Autotuner(CONFIGS, [0.30, 0.12, 0.50]))
    (file,) = tmp_path.iterdir()
    write_checked(file, content)   # its checksum right: what it holds is checked too
    keeper, bench = start(tmp_path)
    kernel = Autotuner(CONFIGS, [0.30, 0.50, 0.05])
    assert fastest(bench(kernel)) == CONFIGS[2] and kernel.timed == 1 and counts(keeper) == {"damaged": 1}


def test_candidates_that_print_alike_or_a_kernel_without_a_file_are_timed_and_not_kept(tmp_path):
    keeper, bench = start(tmp_path)
    twins = Autotuner([CONFIGS[0], CONFIGS[0]], [0.2, 0.1])
    nameless = Autotuner(CONFIGS, [0.3, 0.2, 0.1], filename=None)
    assert fastest(bench(twins)) == CONFIGS[0] and fastest(bench(nameless)) == CONFIGS[2]
    assert twins.timed == 1 and nameless.timed == 1 and counts(keeper) == {"unkeyed": 2}
    assert list(tmp_path.iterdir()) == []


def test_timings_that_are_not_numbers_or_a_folder_that_cannot_be_written_keep_nothing(tmp_path):
    keeper, bench = start(tmp_path / "kept")
    failed = Autotuner(CONFIGS, [0.3, math.nan, 0.1])
    assert bench(failed)[failed.launchers[2]] == 0.1 and counts(keeper) == {"unwritten": 1}
    assert not (tmp_path / "kept").exists()
    (tmp_path / "blocked").write_text("a file where the folder would be")
    keeper, bench = start(tmp_path / "blocked")
    kernel = Autotuner(CONFIGS, [0.3, 0.2, math.inf])   # a candidate that failed: inf, kept as such
    assert fastest(bench(kernel)) == CONFIGS[1] and counts(keeper) == {"unwritten": 1}
    keeper, bench = start(tmp_path / "kept")
    bench(Autotuner(CONFIGS, [0.3, 0.2, math.inf]))
    keeper, bench = start(tmp_path / "kept")
    timings = bench(Autotuner(CONFIGS, [1.0, 1.0, 1.0]))
    assert counts(keeper) == {"kept": 1} and math.isinf(max(timings.values())) and fastest(timings) == CONFIGS[1]


def test_install_wraps_torchs_autotuner_once(tmp_path, monkeypatch):
    from torch._inductor.runtime import triton_heuristics
    original = triton_heuristics.CachingAutotuner.benchmark_all_configs
    monkeypatch.setattr(triton_heuristics.CachingAutotuner, "benchmark_all_configs", original)   # put back after
    monkeypatch.setattr(autotune_kept, "_installed", None)
    assert autotune_kept.report() == {}
    assert autotune_kept.install(tmp_path)
    wrapped = triton_heuristics.CachingAutotuner.benchmark_all_configs
    assert wrapped is not original and wrapped.__wrapped__ is original
    assert autotune_kept.install(tmp_path / "elsewhere")   # once a process: the first folder stays
    assert triton_heuristics.CachingAutotuner.benchmark_all_configs is wrapped
    assert autotune_kept.report()["kept_autotune"]["kept"] == 0


def test_the_switch_is_on_unless_turned_off_and_says_what_it_takes():
    assert autotune_kept.enabled({})
    assert autotune_kept.enabled({autotune_kept.ENV: "1"})
    assert not autotune_kept.enabled({autotune_kept.ENV: "0"})
    with pytest.raises(RuntimeConfigError, match="COSTSIM_KEPT_AUTOTUNE='yes': expected 1"):
        autotune_kept.enabled({autotune_kept.ENV: "yes"})


def test_the_run_report_says_how_many_kernels_took_kept_timings():
    from runner.report import _compile_line
    start = {"counters": {}, "phases_s": {},
             "kept_autotune": {"kept": 190, "timed": 15, "damaged": 1, "unkeyed": 1, "unwritten": 0, "seconds": 0.21}}
    assert _compile_line(start).endswith("Triton kernels 190 with kept timings, 17 timed (0.2 s)")
    idle = {"counters": {}, "phases_s": {}, "kept_autotune": {"kept": 0, "timed": 0, "damaged": 0, "unkeyed": 0,
                                                              "unwritten": 0, "seconds": 0.0}}
    assert "Triton" not in _compile_line(idle)


def test_a_bad_value_stops_a_run_with_one_line_even_without_compilation(tmp_path, monkeypatch):
    plan = tiny_plan(tmp_path)
    monkeypatch.setenv(autotune_kept.ENV, "yes")
    bad = execute(plan, tmp_path / "run", "--nproc-per-node", "1", "--steps", "2", timeout=120)
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert "COSTSIM_KEPT_AUTOTUNE='yes': expected 1 (keep Triton's autotuning timings" in bad.stderr
    assert "Traceback" not in bad.stderr


def _kernel_object(filename: str, name: str, state: str, inductor_meta: dict):
    """One of torch's CachingAutotuner objects as a loaded kernel leaves it, without Triton (which needs a GPU): made
    without its constructor, carrying what the report reads."""
    from torch._inductor.runtime import triton_heuristics
    obj = object.__new__(triton_heuristics.CachingAutotuner)
    obj.filename, obj.fn = filename, type(name, (), {})
    obj.fn.__name__ = name
    obj.autotune_cache_info = {"autotune_cache_state": state}
    obj.configs, obj.compile_results, obj.inductor_meta, obj.save_cache_hook = [], [], inductor_meta, None
    return obj


def test_the_autotune_report_counts_each_kernel_once_under_all_its_objects_states(tmp_path, monkeypatch):
    """A kernel that several objects hold counts once, under the states of them all (a miss beside a hit shows), the
    objects each; the misses' diagnosis finds the kept best-config file where torch would look for it."""
    import json

    from torch._inductor.runtime import triton_heuristics
    from torch._inductor.runtime.autotune_cache import AutotuneCache

    from runner.speed import autotune_report
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    meta = {"autotune_local_cache": True}
    kernels = tmp_path / "inductor" / "ab"
    kernels.mkdir(parents=True)
    shared, mixed, lone = (str(kernels / f"c{name}.py") for name in ("shared", "mixed", "lone"))
    held = [_kernel_object(shared, "triton_poi_0", "miss", meta), _kernel_object(shared, "triton_poi_0", "miss", meta),
            _kernel_object(mixed, "triton_red_1", "hit", meta), _kernel_object(mixed, "triton_red_1", "miss", meta),
            _kernel_object(mixed, "triton_red_2", "only 1 config", meta), _kernel_object(lone, "triton_per_3", "hit", meta)]
    asked = triton_heuristics.hash_configs([])
    kept = AutotuneCache.create(meta, shared, asked).local_cache[1]
    with open(kept, "w") as out:
        json.dump({"configs_hash": asked}, out)

    report = autotune_report()
    assert report["states"] == {"miss": 1, "hit+miss": 1, "only 1 config": 1, "hit": 1}
    assert report["object_states"] == {"miss": 3, "hit": 2, "only 1 config": 1}
    assert report["best_config_files"] == 1
    assert [(m["kernel"], m["objects"], m["states"], m["best_config_file"], m["kept_hash_is_asked"])
            for m in report["missed"]] == [("cshared.py", 2, "miss", True, True),   # those that only missed first
                                           ("cmixed.py", 2, "hit+miss", False, False)]
    assert len(held) == 6   # kept alive until the report has walked them
