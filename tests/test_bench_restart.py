"""scripts/bench_restart.py on a kept GPU run's telemetry (no torch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from costsim.contract.jsonfiles import read_jsonl
from runner.report import restart_times

ROOT = Path(__file__).resolve().parent.parent
KEPT = ROOT / "data" / "measurements" / "2026-12-07-h100-graph-tree-index" / "preload"


def test_a_notice_after_the_training_ended_gives_no_notice_figures_and_a_drills_notice_its_own():
    """The `on` run: a drill's notice at step 4 (the supervisor restarted inside the life), then `timeout`'s SIGTERM
    during the final export, which ended the life with notice_t but stopped no worker. The notice rows would pair
    the drill's stop with the later notice (-117 s) and call the export's end a notice to exit."""
    bench = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_restart.py"), str(KEPT / "on" / "telemetry.jsonl"),
                            str(KEPT / "off" / "telemetry.jsonl")], capture_output=True, text=True, check=True)
    rows = bench.stdout.splitlines()[1:]
    assert not [row for row in rows if "notice" in row and "(drill, restart 1)" not in row], rows
    # the drill's notice inside the life: from the notice to the supervisor's restart (the workers' exit)
    events = read_jsonl(KEPT / "on" / "telemetry.jsonl")
    injected = next(e["t"] for e in events if e["event"] == "preempted" and e.get("kind") == "injected-term")
    restart = next(e["t"] for e in events if e["event"] == "restart")
    (drill,) = [row for row in rows if row.startswith("on ") and "(drill, restart 1)" in row]
    assert "a save, nothing in flight" in drill and float(drill.split()[-5]) == round(restart - injected, 1)
    restarts = {row.split()[0]: float(row.split()[-5]) for row in rows if "decision to the first step" in row}
    # labelled by the kept file's folder, each its report's restart
    assert restarts == {name: round(restart_times(read_jsonl(KEPT / name / "telemetry.jsonl"))[0], 1)
                        for name in ("on", "off")}


def test_runs_kept_in_folders_of_one_name_are_told_apart_by_their_paths():
    """precompiled-resume keeps on/run and off/run: labelled `run` both, their rows could not be told apart."""
    kept = KEPT.parent / "precompiled-resume"
    bench = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_restart.py"),
                            str(kept / "on" / "run" / "telemetry.jsonl"), str(kept / "off" / "run")],
                           capture_output=True, text=True, check=True)
    restarts = {row.split()[0]: float(row.split()[-5]) for row in bench.stdout.splitlines()[1:]
                if "decision to the first step" in row}
    assert restarts == {f"{name}/run": round(restart_times(read_jsonl(kept / name / "run" / "telemetry.jsonl"))[0], 1)
                        for name in ("on", "off")}


def test_a_restarts_first_step_shows_the_autotuners_timing_and_the_generated_modules_load():
    """The kept bytecode's A/B on an H100: each restart's row of its first step's autotuner timing and module loads
    are the restart's compile event's phases (its second compile event: the first is the fresh start's), with no
    issue baseline beside them."""
    kept = ROOT / "data" / "measurements" / "2026-12-07-h100-inductor-bytecode" / "call3"
    runs = [kept / "1-inductor-bytecode-0" / "run", kept / "2-inductor-bytecode-1" / "run"]
    bench = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_restart.py"), *map(str, runs)],
                           capture_output=True, text=True, check=True)
    rows = bench.stdout.splitlines()[1:]
    for run in runs:
        compiles = [e for e in read_jsonl(run / "telemetry.jsonl") if e["event"] == "compile"]
        phases = compiles[1]["phases_s"]
        for name, phase in (("autotuner timing kernels", "CachingAutotuner.benchmark_all_configs"),
                            ("generated modules' load", "PyCodeCache.load_by_key_path")):
            (row,) = [r for r in rows if r.startswith(run.parent.name) and f"restart 1, {name}" in r]
            assert row.split()[-1] == f"{phases[phase]:.1f}"   # the figure, and no issue baseline or goal after it
