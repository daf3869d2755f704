"""What the controller costs and how late it sees a preemption, as ratios to the trace's time step.

    python3 scripts/bench_control.py [RUN_DIR ...]

1. Cost per decision: the controller (policy, View, local backend) replayed in virtual time over the
   100 shipped Can't Be Late windows (48 h job, 52 h deadline) with a stand-in job, the wall time of
   the whole loop over the policy calls; and one incremental read of a real run folder's telemetry
   (what every poll does). Both are printed against the 600 s tick at the drill's time scale.
2. Lateness: for each preempted instance in the given `costsim control` run folders (drills; without
   any, one local drill of the tiny job on window 6 is run first), how long after the trace's
   capacity ended (local: after the notice was due) the controller acted, and how long after the
   reclaim it saw the instance gone, in trace seconds and as a ratio to the tick.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from costsim.control.progress import RunFolder  # noqa: E402
from costsim.io.specs import load_trace  # noqa: E402

WINDOWS = ROOT / "data" / "traces" / "cbl-us-west-2a-v100"
TICK_S = 600.0
SCALE = 600.0


def decision_cost() -> None:
    from test_control import H, controlled
    setting = dict(total_steps=48 * 3600, step_s=1.0, startup_s=0.1 * H, interval_s=H, deadline_s=52 * H,
                   notice_s=120.0, poll_s=60.0)
    decisions, polls, wall = 0, 0, 0.0
    for policy in ("greedy", "uniform-progress"):
        for window in range(100):
            ticks, gap_s = load_trace(WINDOWS / f"{window}.json")
            started = time.perf_counter()
            journal = controlled(ticks, gap_s, policy, **setting)
            wall += time.perf_counter() - started
            decisions += journal.report["decisions"]
            polls += round(journal.end_s / setting["poll_s"])
    tick_wall = TICK_S / SCALE
    per_decision, per_poll = wall / decisions, wall / polls
    print(f"controller in virtual time: 200 runs, {decisions} decisions, ~{polls} polls, {wall:.2f} s of wall time")
    print(f"  per decision (its share of the loop included) {per_decision * 1e3:.3f} ms = {per_decision / tick_wall:.1e} "
          f"of a {TICK_S:.0f} s tick at {SCALE:.0f}x ({tick_wall:.1f} s wall)")
    print(f"  per poll {per_poll * 1e6:.1f} us = {per_poll / tick_wall:.1e} of a tick")


def observe_cost(run_dir: Path) -> None:
    telemetry = run_dir / "telemetry.jsonl"
    lines = telemetry.read_bytes().splitlines(keepends=True)
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "telemetry.jsonl"
        folder, chunk, times = RunFolder(Path(tmp)), max(1, len(lines) // 200), []
        with open(target, "wb") as out:
            for i in range(0, len(lines), chunk):
                out.write(b"".join(lines[i:i + chunk]))
                out.flush()
                started = time.perf_counter()
                folder.observe()
                times.append(time.perf_counter() - started)
    per = statistics.median(times)
    print(f"run folder read per poll ({chunk} new lines, the median of {len(times)} reads of {run_dir.name}): "
          f"{per * 1e3:.3f} ms = {per / (TICK_S / SCALE):.2e} of a tick at {SCALE:.0f}x")


def lateness(run_dir: Path) -> list[dict]:
    doc = json.loads((run_dir / "control.json").read_text())
    ticks, gap_s = load_trace(doc["trace"]) if doc.get("trace") else (None, None)
    rows = []
    for instance in doc["instances"]:
        handle = instance["handle"]
        if instance["ended"] != "preempted" or "noticed" not in handle:
            continue
        if doc["backend"] == "local":
            due = max(handle["reclaim_at"] - doc["notice_s"], instance["start_s"])   # a start inside the window
            rows.append({"run": run_dir.name, "backend": "local", "acted_late_s": handle["noticed"] - due,
                         "saw_gone_after_reclaim_s": instance["end_s"] - handle["reclaim_at"]})
        else:   # slurm: from the trace's outage start (when the reclaim job was due) to Slurm's PreemptTime seen
            start = instance["start_s"]
            outage = next((i * gap_s for i in range(int(start // gap_s), len(ticks)) if ticks[i] == 1), None)
            if outage is not None:
                rows.append({"run": run_dir.name, "backend": "slurm", "acted_late_s": handle["noticed"] - max(outage, start),
                             "saw_gone_after_reclaim_s": instance["end_s"] - max(outage, start)})
    return rows


def main(argv: list[str]) -> None:
    runs = [Path(a) for a in argv]
    if not runs:
        tmp = Path(tempfile.mkdtemp(prefix="bench-control-"))
        plan = tmp / "drill.json"
        subprocess.run([sys.executable, "-m", "costsim", "plan", "--workload", "tiny-drill", "--trials", "20",
                        "--out", str(plan)], check=True, capture_output=True)
        print(f"running a local drill (about two minutes) in {tmp / 'run'}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "costsim", "control", str(plan), "--policy", "greedy", "--trace",
                        str(WINDOWS / "6.json"), "--time-scale", str(SCALE), "--deadline", "16h", "--notice", "10m",
                        "--steps", "24000", "--poll", "0.1s", "--run-dir", str(tmp / "run")], check=True,
                       capture_output=True)
        runs = [tmp / "run"]
    decision_cost()
    observe_cost(runs[0])
    rows = [row for run in runs for row in lateness(run)]
    if not rows:
        print("no preempted instance in the given runs")
        return
    labels = {"acted_late_s": "notice given late by (local) / preemption seen late by (slurm)",
              "saw_gone_after_reclaim_s": "instance seen gone after the reclaim (local) / the outage began (slurm)"}
    for backend in ("local", "slurm"):
        chosen = [r for r in rows if r["backend"] == backend]
        for key, label in labels.items():
            values = [r[key] for r in chosen]
            if values:
                print(f"{backend}: {label}: median {statistics.median(values):.1f} trace s, max {max(values):.1f} "
                      f"(= {statistics.median(values) / TICK_S:.3f} / {max(values) / TICK_S:.3f} of a {TICK_S:.0f} s "
                      f"tick; {len(values)} preemptions in {len({r['run'] for r in chosen})} run(s))")


if __name__ == "__main__":
    main(sys.argv[1:])
