"""The local drill over many real capacity windows and both deadline-aware policies, one run after
another: what `costsim control` billed against its as-known and hindsight predictions, whether the
deadline was met (and whether it was feasible: on-demand from the start, at the speed this machine
really ran, meets it), the moves and the largest margin kept.

    python3 scripts/control_windows.py --windows 100-119 [--policies greedy,uniform-progress]
        [--steps 12000] [--deadline 16h] [--time-scale 600] [--load-at 0.5] [--out FILE.jsonl]

Windows are those of data/traces/cbl-us-west-2a-v100-1000.json.gz (Can't Be Late's 1,000). `--load-at F`
starts a busy loop on one core once F of the job's steps are done (a machine that slows down half-way).
Prints one line per run and a summary: deadlines met among the feasible ones, and the median and largest
|error| of the bill against the as-known replay (which measures the controller) and against hindsight.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "data" / "traces" / "cbl-us-west-2a-v100-1000.json.gz"


def windows(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out += list(range(int(low), int(high or low) + 1))
    return out


def busy() -> None:
    while True:
        pass


def drill(plan: Path, run_dir: Path, policy: str, window: int, args) -> dict:
    command = [sys.executable, "-m", "costsim", "control", str(plan), "--policy", policy, "--trace",
               f"{BUNDLE}#{window}", "--time-scale", str(args.time_scale), "--deadline", args.deadline, "--notice",
               args.notice, "--steps", str(args.steps), "--poll", args.poll, "--run-dir", str(run_dir), "--format", "json"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    loader = None
    if args.load_at is not None:   # a busy loop on one core once the job is that far
        while proc.poll() is None:
            time.sleep(0.5)
            journal = run_dir / "telemetry.jsonl"
            steps = [json.loads(line).get("step", 0) for line in journal.read_text().splitlines()[-50:]
                     if '"event":"step"' in line] if journal.exists() else []
            if steps and max(steps) >= args.load_at * args.steps:
                loader = multiprocessing.Process(target=busy, daemon=True)
                loader.start()
                break
    out, err = proc.communicate()
    if loader is not None:
        loader.terminate()
    if proc.returncode not in (0, 1) or not out.strip():
        return {"window": window, "policy": policy, "error": err.strip().splitlines()[-1:]}
    return json.loads(out)


def feasible(doc: dict) -> bool:
    """On-demand from the start, at this run's final figures, meets the deadline."""
    inputs = (doc.get("hindsight") or {}).get("inputs")
    if not inputs:
        return False
    saves = int(inputs["work_s"] // inputs["interval_s"]) if inputs["interval_s"] else 0
    paid = inputs["checkpoint_stall_s"] if inputs["checkpoint_stall_s"] is not None else inputs["checkpoint_s"]
    needed = inputs["start_s"] + inputs["work_s"] + saves * paid + inputs["checkpoint_s"] + inputs["release_s"]
    return needed <= doc["deadline_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", default="100-119")
    parser.add_argument("--policies", default="greedy,uniform-progress")
    parser.add_argument("--steps", type=int, default=12000)
    parser.add_argument("--deadline", default="16h")
    parser.add_argument("--notice", default="10m")
    parser.add_argument("--time-scale", type=float, default=600.0)
    parser.add_argument("--poll", default="0.1s")
    parser.add_argument("--load-at", type=float, help="start a busy loop on one core at this share of the steps")
    parser.add_argument("--out", type=Path, help="also write every run's control.json report here (JSON lines)")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        plan = Path(tmp) / "drill.json"
        subprocess.run([sys.executable, "-m", "costsim", "plan", "--workload", "tiny-drill", "--trials", "40", "--out",
                        str(plan)], check=True, capture_output=True)
        for window in windows(args.windows):
            for policy in args.policies.split(","):
                started = time.time()
                doc = drill(plan, Path(tmp) / f"run-{window}-{policy}", policy, window, args)
                doc.update(window=window, policy=policy, wall_s=time.time() - started)
                results.append(doc)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(json.dumps(doc) + "\n")
                if "error" in doc and "cost" not in doc:
                    print(f"window {window:4d} {policy:17s} FAILED: {doc['error']}", flush=True)
                    continue
                known, hind = doc.get("predicted") or {}, doc.get("hindsight") or {}
                print(f"window {window:4d} {policy:17s} billed {doc['cost']:7.2f}  as known {known.get('cost', 0):7.2f} "
                      f"({100 * (doc['error']['cost_rel'] or 0):+6.1f}%)  hindsight {hind.get('cost', 0):7.2f} "
                      f"({100 * (doc['error_hindsight']['cost_rel'] or 0):+6.1f}%)  finish "
                      f"{(doc['finish_s'] or 0) / 3600:5.2f} h  deadline {'met' if doc['deadline_met'] else 'MISSED'}"
                      f"{'' if feasible(doc) else ' (infeasible from the start)'}  moves {doc['moves']}  margin "
                      f"{(doc.get('margin_max_s') or 0) / 3600:.2f} h  ({doc['wall_s']:.0f} s)", flush=True)
    done = [d for d in results if "cost" in d]
    ok = [d for d in done if feasible(d)]
    errors = [abs(d["error"]["cost_rel"]) for d in done if d["error"]["cost_rel"] is not None]
    hind = [abs(d["error_hindsight"]["cost_rel"]) for d in done if d["error_hindsight"]["cost_rel"] is not None]
    print(f"deadlines met {sum(d['deadline_met'] for d in ok)}/{len(ok)} of the runs feasible from the start "
          f"({sum(d['deadline_met'] for d in done)}/{len(done)} of all); |bill error| against the as-known replay: "
          f"median {100 * statistics.median(errors):.1f}%, max {100 * max(errors):.1f}%; against hindsight: median "
          f"{100 * statistics.median(hind):.1f}%, max {100 * max(hind):.1f}%; {len(results) - len(done)} runs failed")


if __name__ == "__main__":
    main()
