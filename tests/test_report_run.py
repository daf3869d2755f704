"""`runner report` on telemetry whose start and restart phases are known by construction."""

import json
import subprocess
import sys


def attempt(t0: float, *, build: float, load: float | None, first: float, step: float, steps: range) -> list[dict]:
    """One launch: runtime event after `build`, an optional checkpoint load, start, a first step of
    `first` seconds, then steady steps of `step` seconds."""
    events = [{"t": t0, "event": "launch"}, {"t": t0 + build, "event": "runtime", "rank": 0}]
    t = t0 + build
    if load is not None:
        t += load
        events.append({"t": t, "event": "checkpoint_load", "rank": 0, "duration_s": load})
    events.append({"t": t, "event": "start", "rank": 0, "step": steps.start})
    t += first
    events.append({"t": t, "event": "step", "rank": 0, "step": steps.start + 1, "step_time_s": first, "samples": 8})
    for n in steps[1:]:
        t += step
        events.append({"t": t, "event": "step", "rank": 0, "step": n + 1, "step_time_s": step, "samples": 8})
    return events


def test_first_start_and_restart_are_split_into_their_phases(tmp_path):
    first = attempt(0.0, build=12.0, load=None, first=40.0, step=0.5, steps=range(0, 30))
    killed = first[-1]["t"]
    restart_at = killed + 7.0
    second = attempt(restart_at, build=9.0, load=6.0, first=3.0, step=0.5, steps=range(20, 40))
    second[1].update(process_start_t=restart_at + 2.5, start_phases_s={"imports": 4.0, "build": 2.5})
    first[1]["device"], second[1]["device"] = "NVIDIA H200", "NVIDIA H100 80GB HBM3"   # lives on two kinds of GPU
    events = first + [{"t": killed, "event": "preempted", "rank": 0, "step": 30},
                      {"t": restart_at, "event": "restart"}] + second
    (tmp_path / "telemetry.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    result = subprocess.run([sys.executable, "-m", "runner", "report", str(tmp_path), "--format", "json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    start, = report["startup_phases_s"]
    restart, = report["restart_phases_s"]
    assert (start["start_and_build_s"], start["load_s"], start["first_step_s"]) == (12.0, None, 40.0)
    assert (restart["noticed_s"], restart["start_and_build_s"], restart["load_s"], restart["first_step_s"]) == \
        (7.0, 9.0, 6.0, 3.0)
    assert start["later_warmup_excess_s"] == restart["later_warmup_excess_s"] == 0.0
    assert (restart["to_worker_process_s"], restart["worker_start_s"]) == (2.5, {"imports": 4.0, "build": 2.5})
    assert start["to_worker_process_s"] is None and start["worker_start_s"] is None
    assert report["restart_to_first_step_s"] == [18.0]
    assert report["devices"] == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]


def test_an_async_saves_cost_is_its_stalled_step_and_the_slower_steps_beside_its_write(tmp_path):
    """Steady steps of 0.5 s; an async save after step 10 stalls 0.25 s, and the step that pays it
    takes 0.125 s more besides; its background write then runs for three steps of 0.75 s."""
    from costsim.contract.steps import async_save_costs, steady_step_times
    times = {11: 0.875, 12: 0.75, 13: 0.75, 14: 0.75}
    events, t = [{"t": 0.0, "event": "start", "rank": 0, "step": 0}], 0.0
    for n in range(1, 21):
        t += times.get(n, 0.5)
        events.append({"t": t, "event": "step", "rank": 0, "step": n, "step_time_s": times.get(n, 0.5), "samples": 8})
        if n == 14:   # the write began when step 10 ended (t = 5.0): 0.25 s of stall, then 2.875 s beside training
            events.append({"t": t, "event": "checkpoint_save", "rank": 0, "step": 10, "mode": "async",
                           "reason": "interval", "duration_s": t - 5.0, "stall_s": 0.25})
    assert steady_step_times(events) == [0.5] * 11   # steps 6-10 and 15-20: neither warm-up nor checkpoint
    assert async_save_costs(events, 0.5) == [0.375 + 3 * 0.25]
    (tmp_path / "telemetry.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    result = subprocess.run([sys.executable, "-m", "runner", "report", str(tmp_path), "--format", "json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["step_time_s"], report["async_stall_s"], report["async_cost_s"]) == (0.5, [0.25], [1.125])
    assert report["step_time_while_writing_ratio"] == 1.5


def test_the_table_and_the_plot_show_validation_losses_and_the_export(tmp_path):
    events = attempt(0.0, build=5.0, load=None, first=2.0, step=0.5, steps=range(0, 20))
    events += [{"t": 8.0, "event": "progress", "rank": 0, "step": 10, "loss_rank0": 0.9},
               {"t": 8.1, "event": "validation", "rank": 0, "step": 10, "loss": 0.8, "samples": 4, "duration_s": 0.2},
               {"t": 13.0, "event": "validation", "rank": 0, "step": 20, "loss": 0.6, "samples": 4, "duration_s": 0.2},
               {"t": 13.5, "event": "checkpoint_save", "rank": 0, "step": 20, "mode": "sync", "duration_s": 0.4},
               {"t": 14.0, "event": "export", "rank": 0, "step": 20, "path": "RUN/final", "bytes": 1234,
                "duration_s": 0.1}]
    events.sort(key=lambda e: e["t"])
    (tmp_path / "telemetry.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    plot = tmp_path / "run.png"
    result = subprocess.run([sys.executable, "-m", "runner", "report", str(tmp_path), "--plot", str(plot)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    rows = {line[:20].strip(): line[21:] for line in result.stdout.splitlines()}
    assert rows["validation loss"] == "0.8 at step 10, 0.6 at step 20 (0.4 s in all)"
    assert rows["exported"] == "RUN/final, 1.23 kB in 0.1 s"
    assert rows["step time"].startswith("500 ms mean, 500 ms median")
    assert max(len(line) for line in result.stdout.splitlines()) <= 120
    assert "{" not in result.stdout and "None" not in result.stdout   # no Python reprs for people
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    missing = subprocess.run([sys.executable, "-m", "runner", "report", str(tmp_path / "nothing")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "not a run folder" in missing.stderr and "Traceback" not in missing.stderr


def test_a_start_under_cuda_graphs_says_how_long_it_recorded_them():
    """The run of data/measurements/2026-12-06-h100-graphs-resume (compile_mode=reduce-overhead, a resume from its
    checkpoint): each start's compile line says how long recording the CUDA graphs took (torch's compile_times, kept
    in the start's `compile` event); a start that recorded none says nothing of it."""
    from pathlib import Path
    run = Path(__file__).resolve().parents[1] / "data" / "measurements" / "2026-12-06-h100-graphs-resume" / "run"
    shown = subprocess.run([sys.executable, "-m", "runner", "report", str(run)], capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())   # the table wraps its long lines
    assert "backend 14.0 s; CUDA graphs recorded 14.3 s" in text   # the first start, from an empty cache
    assert "FX graph cache 4 hit(s), 0 miss(es)" in text and "CUDA graphs recorded 10.4 s" in text   # the resume
    from runner.report import _compile_line
    plain = {"counters": {"inductor.fxgraph_cache_hit": 4}, "phases_s": {"_compile.compile_inner": 3.7}}
    assert "CUDA graphs" not in _compile_line(plain)
    skipped = {"counters": {"inductor.cudagraph_skips": 2}, "phases_s": {}}
    assert _compile_line(skipped).endswith("2 graph(s) ran without CUDA graphs")
