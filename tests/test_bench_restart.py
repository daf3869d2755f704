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
