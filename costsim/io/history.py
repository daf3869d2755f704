"""A team's real demand from its scheduler's accounting: Slurm's `sacct -a -P` output, or a CSV.

What a real dump holds is cleaned, and every record left out is counted by reason:
- job steps (`123.batch`, `123.0`, `123.extern`): the job's own record carries its allocation;
- jobs cancelled before they started, jobs still pending or running (no end yet), CPU-only jobs;
- a requeued or preempted job appears once per run (`sacct -D`): it is one job, submitted when it was
  first submitted, whose run time is the sum of its runs (the GPU time it really took);
- array elements (`12_3`) are jobs of their own.

Times without an offset are read in the time zone given (the scheduler's, Slurm prints local time);
run times come from `Elapsed` where the dump has it, which a daylight-saving change cannot bend.
"""

from __future__ import annotations

import csv
import datetime as dt
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from costsim.errors import InputError
from costsim.fleet.demand import Job
from costsim.units import format_duration

# The command docs/compare.md gives (`-D`: every run of a requeued job; no `-X`: steps are dropped here).
SACCT_FORMAT = "JobID,JobIDRaw,Partition,Submit,Start,End,State,AllocTRES,NNodes,Elapsed"
SACCT_REQUIRED = ("JobID", "Submit", "Start", "End", "State", "AllocTRES")
CSV_REQUIRED = ("job_id", "submit", "start", "end", "gpus")
CSV_OPTIONAL = ("nodes", "state", "partition")
FORMATS = ("sacct", "csv")
NOT_STARTED = {"", "None", "Unknown"}
# States of a record that has not ended yet. A REQUEUED record (and REQUEUE_HOLD, REQUEUE_FED) is a run
# that ended when its job was requeued: it used its GPUs, and with `-D` its job's next run follows.
UNFINISHED = {"PENDING", "RUNNING", "RESIZING", "SUSPENDED"}
_GPU = re.compile(r"(?:^|,)gres/gpu(?::[^=,]+)?=(\d+)")
_UNTYPED_GPU = re.compile(r"(?:^|,)gres/gpu=(\d+)")
_ELAPSED = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")


@dataclass(frozen=True, slots=True)
class Run:
    """One record that ran: a job's run (a requeued job has several)."""

    job: str
    submit: float        # epoch seconds, UTC
    start: float
    duration_s: float
    gpus: int
    nodes: int
    partition: str


@dataclass(slots=True)
class History:
    """The jobs of a dump, times relative to `start` (the first submission), and what was left out."""

    source: str
    jobs: list[Job]
    start: float                       # epoch seconds of the first submission
    end: float                         # epoch seconds of the last job's end
    records: int
    dropped: Counter = field(default_factory=Counter)   # reason -> records
    merged_runs: int = 0               # runs of requeued jobs folded into their job

    @property
    def span_s(self) -> float:
        return self.end - self.start

    def summary(self) -> str:
        """For people: what was read and what was left out, and why."""
        left = "; ".join(f"{count} {reason}" for reason, count in self.dropped.most_common())
        merged = f"; {self.merged_runs} runs of requeued jobs merged into their jobs" if self.merged_runs else ""
        return (f"{self.source}: {self.records} records -> {len(self.jobs)} GPU jobs over "
                f"{format_duration(self.span_s)}" + (f" (left out: {left})" if left else "") + merged)


def load_history(path: str | Path, *, fmt: str | None = None, tz: str = "UTC", skip_bad: bool = False) -> History:
    """The demand in a `sacct -a -P` dump or a CSV (by `fmt`, else by the header)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")   # a spreadsheet's "CSV UTF-8" starts with a byte-order mark
    except FileNotFoundError:
        raise InputError(str(path), "file", "not found") from None
    except (IsADirectoryError, UnicodeDecodeError, PermissionError) as exc:
        raise InputError(str(path), "file", f"cannot be read ({exc.__class__.__name__})") from None
    zone = _zone(tz)
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))   # comments on top
    if first == len(lines):
        raise InputError(str(path), "file", "empty: expected a header line and records")
    if _fixed_width_table(lines[first:]):
        raise InputError(f"{path} line {first + 1}", "header", "this is sacct's table for people (fixed-width "
                         "columns under a line of dashes): run sacct with -P (parsable, fields separated by |) and "
                         f"--format={SACCT_FORMAT} (docs/compare.md)")
    fmt = fmt or ("sacct" if "|" in lines[first] else "csv")
    if fmt not in FORMATS:
        raise InputError("--history-format", "history_format", f"got {fmt!r}; allowed: {', '.join(FORMATS)}")
    dropped: Counter = Counter()
    reader = _sacct_runs if fmt == "sacct" else _csv_runs
    runs = reader(path, lines[first:], first, zone, dropped, skip_bad)
    return _jobs(str(path), runs, len(lines) - first - 1, dropped)


def _fixed_width_table(lines: list[str]) -> bool:
    """sacct's default output: a header, then a rule of dashes under each column."""
    rule = lines[1].strip() if len(lines) > 1 else ""
    return "|" not in lines[0] and bool(rule) and set(rule) <= {"-", " "}


def _zone(tz: str) -> dt.tzinfo:
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError("--timezone", "timezone", f"unknown time zone {tz!r}; give an IANA name such as UTC or "
                         "Europe/Berlin") from None


def _sacct_runs(path: Path, lines: list[str], offset: int, zone: dt.tzinfo, dropped: Counter,
                skip_bad: bool) -> list[Run]:
    header = lines[0].split("|")
    missing = [name for name in SACCT_REQUIRED if name not in header]
    if missing:
        raise InputError(f"{path} line {offset + 1}", "header", f"missing {', '.join(missing)}; run sacct with "
                         f"--format={SACCT_FORMAT} (docs/compare.md)")

    def parse(where: str, line: str) -> Run | None:
        values = line.split("|")
        if len(values) != len(header):
            raise InputError(where, "fields", f"{len(values)} fields, the header has {len(header)}")
        return _sacct_run(where, dict(zip(header, values)), zone, dropped)

    rows = ((f"{path} line {number}", line) for number, line in enumerate(lines[1:], start=offset + 2) if line.strip())
    return _good_runs(rows, parse, dropped, skip_bad)


def _good_runs(rows, parse, dropped: Counter, skip_bad: bool) -> list[Run]:
    """`parse(where, row)` of each row (None: left out, counted by `parse`); a bad row's InputError goes
    up, or with --skip-bad is counted and passed over."""
    runs = []
    for where, row in rows:
        try:
            run = parse(where, row)
        except InputError:
            if not skip_bad:
                raise
            dropped["bad rows (--skip-bad)"] += 1
            continue
        if run is not None:
            runs.append(run)
    return runs


def _sacct_run(where: str, row: dict[str, str], zone: dt.tzinfo, dropped: Counter) -> Run | None:
    job = row["JobID"].strip()
    if "." in job:
        dropped["job steps"] += 1
        return None
    state = row["State"].split()[0] if row["State"].strip() else ""
    if row["End"].strip() in NOT_STARTED or state in UNFINISHED:
        dropped["still pending or running (no end)"] += 1
        return None
    tres = row["AllocTRES"].strip()
    elapsed = _elapsed_s(where, row["Elapsed"]) if row.get("Elapsed", "").strip() else None
    if row["Start"].strip() in NOT_STARTED or (state == "CANCELLED" and not tres and not elapsed):
        dropped["cancelled before it started"] += 1
        return None
    gpus = _gpus(tres)
    if gpus == 0:
        dropped["no GPUs (CPU-only)"] += 1
        return None
    submit, start = _time(where, "Submit", row["Submit"], zone), _time(where, "Start", row["Start"], zone)
    end = _time(where, "End", row["End"], zone)   # a time, even where Elapsed gives the run time
    if elapsed is None and end < start:   # (with Elapsed, a clock set back at night may put End before Start)
        raise InputError(where, "End", f"{row['End']} is before Start {row['Start']}")
    duration = elapsed if elapsed is not None else end - start
    nodes = int(row["NNodes"]) if row.get("NNodes", "").strip().isdigit() else 1
    return Run(job=job, submit=submit, start=start, duration_s=duration, gpus=gpus, nodes=max(nodes, 1),
               partition=row.get("Partition", "").strip())


def _csv_runs(path: Path, lines: list[str], offset: int, zone: dt.tzinfo, dropped: Counter,
              skip_bad: bool) -> list[Run]:
    rows = csv.DictReader(lines)
    missing = [name for name in CSV_REQUIRED if name not in (rows.fieldnames or [])]
    if missing:
        raise InputError(f"{path} line {offset + 1}", "header", f"missing {', '.join(missing)}; columns: "
                         f"{', '.join(CSV_REQUIRED)} (required), {', '.join(CSV_OPTIONAL)} (optional)")
    numbered = ((f"{path} line {number}", row) for number, row in enumerate(rows, start=offset + 2))
    return _good_runs(numbered, lambda where, row: _csv_run(where, row, zone, dropped), dropped, skip_bad)


def _csv_run(where: str, row: dict, zone: dt.tzinfo, dropped: Counter) -> Run | None:
    if not (row.get("start") or "").strip():
        dropped["cancelled before it started"] += 1
        return None
    if not (row.get("end") or "").strip():
        dropped["still pending or running (no end)"] += 1
        return None
    try:
        gpus = int(row["gpus"])
    except (TypeError, ValueError):
        raise InputError(where, "gpus", f"got {row.get('gpus')!r}; expected a whole number of GPUs") from None
    if gpus <= 0:
        dropped["no GPUs (CPU-only)"] += 1
        return None
    submit, start = _time(where, "submit", row["submit"], zone), _time(where, "start", row["start"], zone)
    end = _time(where, "end", row["end"], zone)
    if end < start:
        raise InputError(where, "end", f"{row['end']} is before start {row['start']}")
    nodes = (row.get("nodes") or "1").strip()
    if not nodes.isdigit():
        raise InputError(where, "nodes", f"got {nodes!r}; expected a whole number")
    return Run(job=row["job_id"].strip(), submit=submit, start=start, duration_s=end - start, gpus=gpus,
               nodes=max(int(nodes), 1), partition=(row.get("partition") or "").strip())


def _time(where: str, name: str, text: str, zone: dt.tzinfo) -> float:
    """Epoch seconds of an ISO 8601 time; one without an offset is in `zone`."""
    try:
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputError(where, name, f"got {text!r}; expected a time like 2026-11-01T09:30:00") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return moment.timestamp()


def _elapsed_s(where: str, text: str) -> float:
    match = _ELAPSED.match(text.strip())
    if not match:
        raise InputError(where, "Elapsed", f"got {text!r}; expected [D-]HH:MM:SS")
    days, hours, minutes, seconds = match.groups()
    return int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)


def _gpus(tres: str) -> int:
    """GPUs of an AllocTRES: `gres/gpu=N`, else the sum of its typed counts (`gres/gpu:a100=N`)."""
    untyped = _UNTYPED_GPU.findall(tres)
    return int(untyped[0]) if untyped else sum(int(n) for n in _GPU.findall(tres))


def _jobs(source: str, runs: list[Run], records: int, dropped: Counter) -> History:
    """Runs -> jobs: a requeued job's runs are one job (first submission, summed run time)."""
    by_job: dict[str, list[Run]] = {}
    for run in runs:
        by_job.setdefault(run.job, []).append(run)
    if not by_job:
        raise InputError(source, "records", f"no GPU job that ran in {records} records"
                         + (f" (left out: {', '.join(f'{n} {r}' for r, n in dropped.most_common())})" if dropped else ""))
    start = min(r.submit for r in runs)
    jobs = []
    for job, parts in by_job.items():
        first = min(parts, key=lambda r: r.submit)
        jobs.append(Job(name=first.partition or "history", submit_s=first.submit - start,
                        gpus=max(r.gpus for r in parts), duration_s=sum(r.duration_s for r in parts), ref=job))
    end = max(r.start + r.duration_s for r in runs)
    jobs.sort(key=lambda j: (j.submit_s, j.name))
    return History(source=source, jobs=jobs, start=start, end=end, records=records, dropped=dropped,
                   merged_runs=len(runs) - len(by_job))
