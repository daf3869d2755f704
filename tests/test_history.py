"""compare --history: a team's demand from its scheduler's accounting, cleaned as real dumps need, and
replayed against owned fleets and the cloud; a real Slurm's own `sacct` output read back."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from costsim.errors import InputError
from costsim.fleet.demand import WEEK_S, Job, resampled_weeks
from costsim.io.history import SACCT_FORMAT, load_history

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests" / "data" / "sacct-one-host-22.05.txt"
EXAMPLE = ROOT / "data" / "history" / "example-sacct.txt"
HEADER = SACCT_FORMAT.replace(",", "|")


def write(tmp_path: Path, *rows: str, header: str = HEADER, name: str = "h.txt") -> Path:
    path = tmp_path / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_a_real_dump_is_cleaned_with_a_reason_for_every_record_left_out():
    """The one-host Slurm's own `sacct -a -P -D` output (recorded by test_slurm_accounting_is_read_back,
    the job mix below): steps dropped, the array's elements kept, the cancelled and CPU-only jobs left
    out, the preempted job's two runs one job with both run times, and so the requeued job's (its first
    run's record is REQUEUED: 4 s before the requeue, then its whole 8 s)."""
    h = load_history(RECORDED)
    assert h.dropped == {"job steps": 10, "cancelled before it started": 1, "no GPUs (CPU-only)": 1}
    assert h.merged_runs == 2
    assert sorted(j.gpus for j in h.jobs) == [1, 1, 1, 1, 1, 2, 2]
    preempted = [j for j in h.jobs if j.name == "spot"]
    assert len(preempted) == 1 and preempted[0].duration_s == pytest.approx(20 + 30)   # its two runs
    assert sorted(j.duration_s for j in h.jobs if j.name == "on-demand")[-1] == pytest.approx(4 + 8)


def test_requeued_runs_are_one_job_from_its_first_submission_and_times_follow_the_zone(tmp_path):
    rows = ["7|7|gpu|2026-10-25T01:30:00|2026-10-25T02:30:00|2026-10-25T02:10:00|PREEMPTED|gres/gpu=8,node=1|1|00:40:00",
            "7|7|gpu|2026-10-25T02:10:00|2026-10-25T02:20:00|2026-10-25T04:20:00|COMPLETED|gres/gpu=8,node=1|1|03:00:00",
            "8|8|gpu|2026-10-25T05:00:00|2026-10-25T05:00:00|2026-10-25T06:00:00|COMPLETED|gres/gpu:a100=4,node=1|1|01:00:00"]
    h = load_history(write(tmp_path, *rows), tz="Europe/Berlin")
    first, second = h.jobs
    # 40 min + 3 h from Elapsed: the clocks went back at 03:00 that night, End - Start would say otherwise
    assert (first.gpus, first.duration_s) == (8, 3 * 3600 + 40 * 60) and h.merged_runs == 1
    assert second.gpus == 4   # a typed GRES count
    # 01:30 summer time to 05:00 winter time: 3.5 h on the clock face, plus the hour that repeated
    assert second.submit_s - first.submit_s == pytest.approx(3.5 * 3600 + 3600)
    utc = load_history(write(tmp_path, *rows), tz="UTC")
    assert utc.jobs[1].submit_s - utc.jobs[0].submit_s == pytest.approx(3.5 * 3600)


@pytest.mark.parametrize("row, field", [
    ("9|9|gpu|yesterday|2026-10-01T00:00:00|2026-10-01T01:00:00|COMPLETED|gres/gpu=1|1|01:00:00", "Submit"),
    ("9|9|gpu|2026-10-01T00:00:00|2026-10-01T00:00:00|2026-10-01T01:00:00|COMPLETED|gres/gpu=1|1|an hour", "Elapsed"),
    ("9|9|gpu|2026-10-01T00:00:00|2026-10-01T00:00:00|COMPLETED|gres/gpu=1|1|01:00:00", "fields"),
])
def test_a_bad_row_is_one_line_naming_the_row_and_field_or_skipped_and_counted(run_cli, tmp_path, row, field):
    good = "1|1|gpu|2026-10-01T00:00:00|2026-10-01T00:00:00|2026-10-01T01:00:00|COMPLETED|gres/gpu=8|1|01:00:00"
    path = write(tmp_path, good, row)
    result = run_cli("compare", "--history", str(path), "--hardware", "hgx-h100-8", "--resample", "0")
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.stderr
    assert f"{path} line 3: {field}:" in lines[0]
    skipped = run_cli("compare", "--history", str(path), "--hardware", "hgx-h100-8", "--resample", "0", "--skip-bad",
                      "--format", "json")
    assert skipped.exit_code == 0, skipped.stderr
    doc = skipped.json()["history"]
    assert doc["dropped"] == {"bad rows (--skip-bad)": 1} and doc["jobs"] == 1


def test_a_dump_without_the_fields_names_the_sacct_command(tmp_path):
    with pytest.raises(InputError) as error:
        load_history(write(tmp_path, "1|gpu", header="JobID|Partition"))
    assert "line 1" in error.value.source and "--format=" + SACCT_FORMAT in error.value.message


def test_the_csv_format_and_its_columns(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("job_id,submit,start,end,gpus,nodes\n"
                    "a,2026-10-01T00:00:00+02:00,2026-10-01T01:00:00+02:00,2026-10-01T03:00:00+02:00,8,1\n"
                    "b,2026-10-01T00:30:00+02:00,,,4,\n"
                    "c,2026-10-01T00:40:00+02:00,2026-10-01T00:50:00+02:00,2026-10-01T00:55:00+02:00,0,1\n")
    h = load_history(path)
    assert [(j.gpus, j.duration_s) for j in h.jobs] == [(8, 7200.0)]
    assert h.dropped == {"cancelled before it started": 1, "no GPUs (CPU-only)": 1}
    (tmp_path / "bad.csv").write_text("job,submit\nx,2026\n")
    with pytest.raises(InputError) as error:
        load_history(tmp_path / "bad.csv")
    assert "job_id" in error.value.message and "gpus" in error.value.message


def test_resampled_weeks_keep_the_span_and_draw_whole_weeks():
    jobs = [Job(f"w{w}", w * WEEK_S + 3600.0 * h, 8, 3600.0) for w in range(4) for h in range(w + 1)]
    draws = [resampled_weeks(jobs, 4 * WEEK_S + 10.0, np.random.default_rng(s)) for s in range(50)]
    for out, span in draws:
        assert span == 4 * WEEK_S and all(0 <= j.submit_s < span for j in out)
        for week in range(4):   # each week of a draw is one whole week of the history
            names = {j.name for j in out if week * WEEK_S <= j.submit_s < (week + 1) * WEEK_S}
            assert len(names) <= 1
    counts = [len(out) for out, _ in draws]
    assert min(counts) < 10 < max(counts)   # the draws differ; the history has 1+2+3+4 = 10 jobs


def test_the_example_history_compares_with_a_band_json_and_a_plot(run_cli, tmp_path):
    plot = tmp_path / "h.png"
    table = run_cli("compare", "--history", str(EXAMPLE), "--hardware", "hgx-h100-8", "--timezone", "Europe/Berlin",
                    "--resample", "5", "--plot", str(plot))
    assert table.exit_code == 0, table.stderr
    assert "GPU jobs over" in table.stdout and "left out:" in table.stdout and "90% band" in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 125
    assert plot.read_bytes()[:4] == b"\x89PNG"
    doc = run_cli("compare", "--history", str(EXAMPLE), "--hardware", "hgx-h100-8", "--timezone", "Europe/Berlin",
                  "--resample", "5", "--format", "json").json()
    history = doc["history"]
    assert history["jobs"] == doc["jobs"] and history["records"] > history["jobs"]
    assert set(history["dropped"]) >= {"job steps", "cancelled before it started", "no GPUs (CPU-only)",
                                       "still pending or running (no end)"}
    owned = next(s for s in doc["strategies"] if s["kind"] == "owned")
    # the replay serves exactly the history's GPU-hours (less the jobs too large for one server)
    assert owned["used_gpu_hours"] <= history["gpu_hours"] + 1e-6
    low, high = doc["band"]["cost_per_year"][owned["name"]]
    assert low <= owned["cost_per_year"] * 1.01 and high >= owned["cost_per_year"] * 0.99
    for s in doc["strategies"]:
        assert s["cost_per_year"] == pytest.approx(s["total_cost"] * 365 * 86400 / doc["horizon_s"])


def test_history_needs_hardware_or_a_scenario(run_cli):
    result = run_cli("compare", "--history", str(EXAMPLE))
    assert result.exit_code == 2 and "--hardware" in result.stderr
    short = run_cli("compare", "--history", str(RECORDED), "--hardware", "hgx-h100-8")
    assert short.exit_code == 2 and "--resample 0" in short.stderr   # minutes of history: no weeks to draw


# -- a real Slurm's accounting -------------------------------------------------------------------------
ENGINE = (os.geteuid() == 0 and (os.environ.get("CI") or os.environ.get("COSTSIM_ENGINE_TESTS") == "1")
          and os.environ.get("COSTSIM_ENGINE_TESTS") != "0")


def again_short(seconds: int) -> str:
    """A batch script that sleeps `seconds` in its first run and 1 s once requeued."""
    return f'if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then sleep 1; else sleep {seconds}; fi'


def job_mix(folder: Path) -> None:
    """GPUs as GRES and as TRES counts, an array, a job cancelled while it waited, a CPU-only job, and
    a spot job that a higher-priority job preempts and Slurm requeues, and a job an administrator requeues
    (`scontrol requeue`: its first run's record is REQUEUED)."""
    def submit(*args: str) -> str:
        return subprocess.run(["sbatch", "--parsable", "--chdir", str(folder), *args], capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip().split(";")[0]
    subprocess.run(["scontrol", "update", "PartitionName=spot", "PreemptMode=REQUEUE"], check=True, timeout=30)
    submit("-p", "on-demand", "-c1", "--gres=gpu:2", "--wrap", "sleep 3")
    submit("-p", "on-demand", "-c1", "--gpus=1", "--wrap", "sleep 2")
    submit("-p", "on-demand", "-c1", "--array=0-2", "--gres=gpu:1", "--wrap", "sleep 1")
    time.sleep(1)
    waiting = submit("-p", "on-demand", "-c1", "--gres=gpu:4", "--wrap", "sleep 1")   # waits for the GPUs
    time.sleep(1)
    subprocess.run(["scancel", waiting], check=True, timeout=30)
    # long enough to be preempted (4 s, then the 5 s grace); its requeued run (SLURM_RESTART_COUNT 1) is short
    spot = submit("-p", "spot", "-c2", "--gres=gpu:2", "--requeue", "--wrap", again_short(30))
    for _ in range(60):   # preempt it once it runs
        state = subprocess.run(["squeue", "-h", "-j", spot, "-o", "%T"], capture_output=True, text=True).stdout.strip()
        if state == "RUNNING":
            break
        time.sleep(0.5)
    time.sleep(4)
    submit("-p", "reclaim", "-c3", "--wrap", "sleep 5")   # CPU-only; takes the spot job's CPUs
    requeued = submit("-p", "on-demand", "-c1", "--gres=gpu:1", "--requeue", "--wrap", again_short(8))
    for _ in range(120):   # an administrator's requeue once it runs: its first run ends REQUEUED
        state = subprocess.run(["squeue", "-h", "-j", requeued, "-o", "%T"], capture_output=True, text=True).stdout
        if state.strip() == "RUNNING":
            break
        time.sleep(0.5)
    time.sleep(3)
    subprocess.run(["scontrol", "requeue", requeued], check=True, timeout=30)
    for _ in range(120):   # every job gone from the queue, and the requeued one's second run done
        shown = subprocess.run(["scontrol", "show", "job", requeued, "-o"], capture_output=True, text=True).stdout
        if not subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip() \
                and "JobState=COMPLETED" in shown and "Restarts=1" in shown:
            return
        time.sleep(1)
    raise AssertionError("the job mix did not finish")


@pytest.mark.slow
@pytest.mark.skipif(not ENGINE, reason="starts a Slurm with slurmdbd and MariaDB on this machine: only in CI or with "
                    "COSTSIM_ENGINE_TESTS=1, as root")
@pytest.mark.slurm
def test_slurm_accounting_is_read_back(run_cli, tmp_path):
    script = ROOT / "scripts" / "slurm_control_cluster.sh"
    started = dt.datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
    up = subprocess.run(["bash", str(script), "up"], env={**os.environ, "ACCOUNTING": "1", "GRACE": "5"},
                        capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stderr[-2000:]
    try:
        job_mix(tmp_path)
        time.sleep(2)   # slurmctld hands finished jobs to slurmdbd on its own schedule
        dump = tmp_path / "history.txt"
        with open(dump, "w") as out:   # the command docs/compare.md gives
            subprocess.run(["sacct", "-a", "-P", "-D", "--starttime", started, "--endtime", "now",
                            f"--format={SACCT_FORMAT}"], stdout=out, check=True, timeout=60)
    finally:
        subprocess.run(["bash", str(script), "down"], capture_output=True, timeout=300)
    if os.environ.get("COSTSIM_RECORD_SACCT"):
        shutil.copy(dump, RECORDED)
    h = load_history(dump)
    assert h.dropped == {"job steps": 10, "cancelled before it started": 1, "no GPUs (CPU-only)": 1}, dump.read_text()
    assert h.merged_runs == 2 and sorted(j.gpus for j in h.jobs) == [1, 1, 1, 1, 1, 2, 2], dump.read_text()
    assert "|REQUEUED|" in dump.read_text()   # Slurm's own record of a requeued run
    doc = run_cli("compare", "--history", str(dump), "--hardware", "hgx-h100-8", "--resample", "0",
                  "--format", "json").json()
    assert doc["history"]["jobs"] == 7 and doc["jobs"] == 7
    print(json.dumps(doc["history"]), file=sys.stderr)


def test_a_spreadsheets_csv_utf8_with_a_byte_order_mark_is_read(tmp_path):
    """Excel's and LibreOffice's "CSV UTF-8" start the file with U+FEFF; the header is job_id all the same."""
    path = tmp_path / "jobs.csv"
    path.write_bytes("job_id,submit,start,end,gpus\r\n1,2026-11-02T09:00:00,2026-11-02T09:05:00,2026-11-02T11:05:00,8\r\n"
                     .encode("utf-8-sig"))
    (job,) = load_history(path).jobs
    assert (job.gpus, job.duration_s) == (8, 2 * 3600)


def test_sacct_without_parsable_output_is_told_to_use_p(tmp_path, run_cli):
    """A default `sacct` dump (fixed-width columns under a rule of dashes) holds every column asked for, but
    cannot be split reliably (long values are cut to the column's width)."""
    table = ["       JobID      JobIDRaw  Partition              Submit               Start                 End "
             "     State    AllocTRES   NNodes    Elapsed ",
             "------------ ------------ ---------- ------------------- ------------------- ------------------- "
             "---------- ------------ -------- ---------- ",
             "           7            7        gpu 2026-10-25T01:30:00 2026-10-25T02:30:00 2026-10-25T04:10:00 "
             " COMPLETED billing=8+      1   01:40:00 "]
    path = write(tmp_path, *table[1:], header=table[0])
    result = run_cli("compare", "--history", str(path), "--hardware", "hgx-h100-8")
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {path} line 1: header: this is sacct's table for people (fixed-width "
                                     "columns under a line of dashes): run sacct with -P (parsable, fields separated "
                                     f"by |) and --format={SACCT_FORMAT} (docs/compare.md)")


def test_jobs_an_owned_server_cannot_run_are_unserved_not_late_and_named(run_cli, tmp_path):
    """16-GPU jobs on one 8-GPU server: never run. The table says so apart from lateness, names the jobs
    and why, and the break-even says how many jobs the owned fleet's figures cover."""
    rows = ["11|11|gpu|2026-11-02T09:00:00|2026-11-02T09:00:00|2026-11-02T11:00:00|COMPLETED|gres/gpu=8,node=1|1|02:00:00",
            "12|12|gpu|2026-11-03T09:00:00|2026-11-03T09:00:00|2026-11-03T10:00:00|COMPLETED|gres/gpu=16,node=2|2|01:00:00",
            "13|13|gpu|2026-11-10T09:00:00|2026-11-10T09:00:00|2026-11-10T13:00:00|COMPLETED|gres/gpu=4,node=1|1|04:00:00"]
    path = write(tmp_path, *rows)
    result = run_cli("compare", "--history", str(path), "--hardware", "hgx-h100-8", "--resample", "0")
    assert result.exit_code == 0, result.stderr
    own = next(line for line in result.stdout.splitlines() if line.startswith("own-1x-hgx-h100-8 ") and "owned" in line)
    assert own.split()[6:8] == ["0", "1"]   # late 0, unserved 1
    assert ("own-1x-hgx-h100-8 cannot run 1 of 3 jobs (16 of 48 GPU-h, 33%): they ask for more GPUs than its 8 "
            "(16 GPUs: 1 job; jobs 12).") in " ".join(result.stdout.split())
    section = result.stdout.split("\nowned ")[1].split("\n\n")[0].splitlines()[2:]   # the break-even table's rows
    evens = [line for line in section if line.startswith("own-1x-hgx-h100-8 ")]
    assert evens and all(line.split()[-1] == "2/3" for line in evens)   # the jobs its break-even covers
    doc = run_cli("compare", "--history", str(path), "--hardware", "hgx-h100-8", "--resample", "0", "--format",
                  "json").json()
    owned = next(s for s in doc["strategies"] if s["kind"] == "owned")
    assert (owned["unserved"], owned["unserved_jobs"], owned["deadline_misses"]) == (1, ["12"], 0)
    assert owned["used_gpu_hours"] == 32


def test_a_requeued_run_used_its_gpus_and_an_end_that_is_no_time_is_refused(tmp_path, run_cli):
    """`sacct -D`: a run that ended when its job was requeued (state REQUEUED) ran on its GPUs: it is one
    of the job's runs, merged with the next (it used to be left out as 'still pending or running'). A
    row whose End is not a time is one line naming it, even where Elapsed gives the run time."""
    rows = ["9|9|gpu|2026-11-02T09:00:00|2026-11-02T09:00:00|2026-11-02T10:00:00|REQUEUED|gres/gpu=8,node=1|1|01:00:00",
            "9|9|gpu|2026-11-02T10:00:00|2026-11-02T10:05:00|2026-11-02T12:05:00|COMPLETED|gres/gpu=8,node=1|1|02:00:00"]
    h = load_history(write(tmp_path, *rows))
    (job,) = h.jobs
    assert job.duration_s == 3 * 3600 and h.merged_runs == 1 and not h.dropped
    bad = rows[1].replace("2026-11-02T12:05:00", "tomorrow")
    result = run_cli("compare", "--history", str(write(tmp_path, rows[0], bad, name="bad.txt")), "--hardware",
                     "hgx-h100-8")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "line 3: End: got 'tomorrow'; expected a time" in result.stderr
