"""Benchmark what a spot notice costs after the checkpoint is durable: from the workers' `preempted` event
(the notice's save done) to `runner execute`'s end, through torchrun's exit, side by side in one run.

Each round runs the tiny workload's plan under `runner execute` until rank 0 reports step `--at`, sends it
the notice (SIGTERM, as the cloud's agent would), and reads the life's telemetry: notice to training
stopped, stopped to the save done (`preempted`), `preempted` to the supervisor's `exit` event (the workers'
exit and torchrun's), and `exit` to the process's end. The launcher alternates round by round:

  torch.distributed.run   torchrun itself (the runner's launcher before 2026-12-03)
  runner.torchrun         torchrun without the interpreter's teardown after its agent returns (the runner's)

Both run the supervisor as it is now (it leaves with os._exit after a notice's exit). Prints each
phase's median per launcher and the ratio of the tail (preempted to the end) to torchrun's. Needs torch
(the runner extra). Usage, from the repository root:

    python3 scripts/bench_notice_exit.py [--rounds 4] [--at 200]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAUNCHERS = ("torch.distributed.run", "runner.torchrun")
# `runner execute` with the launcher's module swapped in torchrun_argv (nothing else changes)
EXECUTE = r"""
import sys
import runner.supervisor as supervisor
module = sys.argv.pop(1)
original = supervisor.torchrun_argv
def argv(*args, **kwargs):
    out = original(*args, **kwargs)   # [python, "-m", MODULE, ...]
    out[2] = module
    return out
supervisor.torchrun_argv = argv
from runner.cli import main
main(["execute", *sys.argv[1:]])
"""


def reported(run: Path) -> int:
    try:
        lines = (run / "telemetry.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return max((json.loads(line).get("step", 0) for line in lines if '"progress"' in line), default=0)


def life(plan: Path, run: Path, launcher: str, at: int) -> dict[str, float]:
    root = Path(__file__).resolve().parent.parent
    child = subprocess.Popen([sys.executable, "-c", EXECUTE, launcher, str(plan), "--run-dir", str(run),
                              "--steps", "1000000"], cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "PYTHONPATH": str(root)})
    while reported(run) < at:
        if child.poll() is not None:
            raise SystemExit(f"runner execute ended (exit {child.returncode}) before step {at}")
        time.sleep(0.05)
    noticed = time.time()
    child.send_signal(signal.SIGTERM)
    child.wait()
    ended = time.time()
    events = [json.loads(line) for line in (run / "telemetry.jsonl").read_text().splitlines()]
    preempted = [e for e in events if e["event"] == "preempted" and e.get("kind") == "notice"]
    saved = max(e["t"] for e in preempted)
    stopped = max(e.get("stopped_t") or saved for e in preempted)
    exit_t = [e["t"] for e in events if e["event"] == "exit"][-1]
    return {"notice to stopped": stopped - noticed, "stopped to saved": saved - stopped,
            "saved to exit event": exit_t - saved, "exit event to end": ended - exit_t,
            "saved to end": ended - saved, "notice to end": ended - noticed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="lives per launcher, alternating")
    parser.add_argument("--at", type=int, default=200, help="the step rank 0 reports before the notice")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plan = folder / "plan.json"
        subprocess.run([sys.executable, "-m", "costsim", "plan", "--workload", "tiny", "--out", str(plan)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in LAUNCHERS}
        for round_ in range(args.rounds):
            for name in LAUNCHERS:
                results[name].append(life(plan, folder / f"{name}-{round_}", name, args.at))
                print(f"bench_notice_exit: {name} round {round_ + 1}/{args.rounds}: saved to end "
                      f"{results[name][-1]['saved to end']:.3f} s", file=sys.stderr, flush=True)
    phases = list(results[LAUNCHERS[0]][0])
    print(f"{'median seconds':22s}" + "".join(f"{name:>24s}" for name in LAUNCHERS))
    medians = {name: {p: statistics.median(r[p] for r in results[name]) for p in phases} for name in LAUNCHERS}
    for phase in phases:
        print(f"{phase:22s}" + "".join(f"{medians[name][phase]:24.3f}" for name in LAUNCHERS))
    base, now = medians[LAUNCHERS[0]]["saved to end"], medians[LAUNCHERS[1]]["saved to end"]
    print(f"saved to end: {LAUNCHERS[1]} / {LAUNCHERS[0]} = {now / base:.2f}x ({args.rounds} lives each, alternating)")


if __name__ == "__main__":
    main()
