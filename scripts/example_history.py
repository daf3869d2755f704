"""Write data/history/example-sacct.txt: 13 weeks of a team's Slurm accounting, as `sacct -a -P -D`
prints it (docs/compare.md), for `costsim compare --history` to be tried on before a team has its own.

ILLUSTRATIVE, not a real cluster's records: the demand is data/fleets/h100-team.yaml's (a nightly
3-hour 8-GPU job at 20:00 and ~1.2 ad-hoc 8/16-GPU jobs a day, log-normal with median 4 h), printed in
local time (Europe/Berlin, across the end of summer time on 2026-10-25) with what real dumps hold:
job steps, array jobs, jobs cancelled before they started, preempted and requeued jobs (one record
per run), CPU-only jobs, failed jobs and one job still running at the end.

    python3 scripts/example_history.py            # writes data/history/example-sacct.txt
"""

from __future__ import annotations

import datetime as dt
import math
import sys
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costsim.fleet.demand import generate  # noqa: E402
from costsim.io.history import SACCT_FORMAT  # noqa: E402
from costsim.io.scenario import load_fleet  # noqa: E402

ZONE = ZoneInfo("Europe/Berlin")
START = dt.datetime(2026, 9, 1, tzinfo=ZONE)
WEEKS = 13


def local(t: float) -> str:
    return (START + dt.timedelta(seconds=t)).astimezone(ZONE).strftime("%Y-%m-%dT%H:%M:%S")


def elapsed(seconds: float) -> str:
    days, rest = divmod(int(round(seconds)), 86400)
    hours, rest = divmod(rest, 3600)
    return (f"{days}-" if days else "") + f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def record(job: str, raw: str, partition: str, submit: float, start: float | None, end: float | None, state: str,
           gpus: int, nodes: int, steps: bool = True) -> list[str]:
    tres = f"billing={8 * nodes},cpu={8 * nodes},gres/gpu={gpus},mem={64 * nodes}G,node={nodes}" if gpus else \
        f"billing=4,cpu=4,mem=16G,node={nodes}"
    started = start is not None
    fields = [job, raw, partition, local(submit), local(start) if started else "None",
              local(end) if end is not None else "Unknown", state, tres if started else "", str(nodes),
              elapsed((end or start or submit) - (start or submit))]
    lines = ["|".join(fields)]
    if steps and started and end is not None:
        for step in ("batch", "extern", "0"):
            lines.append("|".join([f"{job}.{step}", f"{raw}.{step}", "", local(start), local(start), local(end),
                                   "COMPLETED" if state == "COMPLETED" else "CANCELLED", tres, str(nodes),
                                   elapsed(end - start)]))
    return lines


def main() -> None:
    rng = np.random.default_rng(2026)
    horizon = WEEKS * 7 * 86400.0
    jobs = generate(load_fleet("h100-team"), horizon, seed=11)
    lines, next_id = [], 41000
    for number, job in enumerate(jobs):
        next_id += 1
        partition = "gpu" if job.name == "nightly" else "gpu-preempt"
        nodes = math.ceil(job.gpus / 8)
        submit = job.submit_s
        start = submit + float(rng.exponential(600.0))
        draw = rng.random()
        if number == len(jobs) - 1 or job.submit_s + job.duration_s > horizon:   # running when the dump was taken
            lines += record(str(next_id), str(next_id), partition, submit, start, None, "RUNNING", job.gpus, nodes)
        elif draw < 0.04:    # cancelled while it waited
            lines += record(str(next_id), str(next_id), partition, submit, None, start, "CANCELLED by 1012", job.gpus,
                            nodes)
        elif draw < 0.12 and partition == "gpu-preempt":   # preempted, requeued, then ran to the end
            cut = start + job.duration_s * float(rng.uniform(0.2, 0.7))
            lines += record(str(next_id), str(next_id), partition, submit, start, cut, "PREEMPTED", job.gpus, nodes)
            again = cut + float(rng.exponential(1800.0))
            lines += record(str(next_id), str(next_id), partition, cut, again, again + job.duration_s, "COMPLETED",
                            job.gpus, nodes)
        elif draw < 0.17 and job.gpus == 8 and partition == "gpu-preempt":   # a sweep: an array of 4 one-node runs
            base = next_id
            for task in range(4):
                next_id += 1
                offset = float(rng.uniform(0, 900))
                lines += record(f"{base}_{task}", str(next_id), partition, submit, start + offset,
                                start + offset + job.duration_s / 4, "COMPLETED", 8, 1)
        else:
            state = "FAILED" if draw > 0.97 else "COMPLETED"
            lines += record(str(next_id), str(next_id), partition, submit, start, start + job.duration_s, state,
                            job.gpus, nodes)
        if rng.random() < 0.15:   # data preparation on CPUs
            next_id += 1
            prep = submit + 60
            lines += record(str(next_id), str(next_id), "cpu", prep, prep + 30, prep + 1800, "COMPLETED", 0, 1)
    header = ["# ILLUSTRATIVE Slurm accounting (scripts/example_history.py, written 2026-12-01): data/fleets/"
              "h100-team.yaml's demand printed as `sacct -a -P -D --format=" + SACCT_FORMAT + "` would,",
              "# in local time (Europe/Berlin). Not a real cluster's records; see data/history/README.md.",
              SACCT_FORMAT.replace(",", "|")]
    out = ROOT / "data" / "history" / "example-sacct.txt"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(header + lines) + "\n")
    print(f"wrote {out}: {len(lines)} records, {len(jobs)} jobs of demand")


if __name__ == "__main__":
    main()
