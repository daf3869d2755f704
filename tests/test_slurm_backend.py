"""The Slurm backend's reading of Slurm: recorded output of a real Slurm 22.05 (the one-host cluster of
scripts/slurm_control_cluster.sh, 2026-12-01: tests/data/slurm/), the job sizes it asks for, and a
Slurm command that fails or hangs before it answers."""

from __future__ import annotations

import datetime as dt
import os
import stat
from pathlib import Path

import pytest

from costsim.control import slurm

DATA = Path(__file__).resolve().parent / "data" / "slurm"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_test_only_says_when_a_job_would_start():
    assert slurm.start_time(read("slurm-testonly-free.txt")) == dt.datetime(2026, 12, 1, 9, 23, 23)
    # busy: the next start is a year away (a job of a higher tier holds the CPUs without a time limit)
    assert slurm.start_time(read("slurm-testonly-busy.txt")) == dt.datetime(2027, 12, 1, 9, 23, 25)
    assert slurm.start_time("sbatch: error: Batch job submission failed: Invalid partition name specified") is None


@pytest.mark.parametrize("name, state, preempting", [
    ("slurm-job-running.txt", "RUNNING", False), ("slurm-job-pending.txt", "PENDING", False),
    ("slurm-job-preempting.txt", "RUNNING", True), ("slurm-job-preempted.txt", "PREEMPTED", True),
])
def test_scontrol_show_job_states_and_the_preemption_under_way(name, state, preempting):
    fields = slurm.job_state(read(name), 0)
    assert fields["JobState"] == state
    assert (fields.get("PreemptTime", "None") not in ("None", "")) is preempting


def test_a_job_past_min_job_age_is_gone_and_a_slurm_that_did_not_answer_is_not():
    assert slurm.job_state(read("slurm-job-invalid.txt"), 1) == {"JobState": "GONE"}
    assert slurm.job_state("slurm_load_jobs error: Socket timed out on send/recv operation", 1) == {"JobState": "UNKNOWN"}
    assert slurm.job_state("", 124) == {"JobState": "UNKNOWN"}


def test_jobs_are_sized_from_the_plan():
    assert slurm.job_size("H200", 8, 2, "spot") == ["--nodes", "2", "--ntasks-per-node", "1", "--gpus-per-node", "8"]
    assert slurm.job_size("cpu", 2, 1, "spot") == ["--nodes", "1", "--ntasks-per-node", "1", "--cpus-per-task", "2"]
    assert slurm.job_size("cpu", 1, 2, "on-demand")[:2] == ["--nodes", "2"]   # a 2-node drill: a gang of two
    grace = slurm._fields(read("slurm-partition-spot.txt"))["GraceTime"]
    assert grace == "10"


def test_a_command_that_fails_before_it_answers_is_tried_again_and_logged(tmp_path, monkeypatch, capsys):
    """A stand-in `scontrol` on PATH fails twice (a busy controller), then answers: the backend reads the
    answer, not 'the job is gone'."""
    counter = tmp_path / "calls"
    script = tmp_path / "scontrol"
    script.write_text(f"#!/bin/sh\nn=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}\n"
                      f"if [ $n -lt 3 ]; then echo 'slurm_load_jobs error: Socket timed out' >&2; exit 1; fi\n"
                      f"cat {DATA / 'slurm-job-running.txt'}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(slurm, "RETRY_WAIT_S", 0.0)
    result = slurm._attempts(["scontrol", "show", "job", "69", "-o"])
    assert slurm.job_state(result.stdout, result.returncode)["JobState"] == "RUNNING"
    assert counter.read_text().strip() == "3"
    assert capsys.readouterr().err.count("trying again") == 2


def _stand_in(folder: Path, name: str, body: str) -> None:
    script = folder / name
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_our_own_pending_spot_job_answers_for_the_capacity_and_probes_are_rate_limited(tmp_path, monkeypatch):
    """Stand-ins for squeue and sbatch on PATH (answers as a real Slurm 22.05 gives them). Our spot job
    pends, not looked at yet (reason None): capacity is there, whatever a probe says (a --test-only job
    queues behind ours, a year away; the backend used to believe it and withdraw its own request). Held for
    Resources: not there. With no job of ours, a probe: at most one per PROBE_EVERY_S of wall time."""
    calls = tmp_path / "calls"
    state = tmp_path / "state"
    _stand_in(tmp_path, "squeue", f"echo squeue >> {calls}\ncat {state}\n")
    _stand_in(tmp_path, "sbatch", f"echo sbatch >> {calls}\ncat {DATA / 'slurm-testonly-busy.txt'} >&2\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    backend = slurm.SlurmBackend(None, plan=Path("plan.json"), run_dir=tmp_path, run_id="r", runner_args=[])
    state.write_text("PENDING None\n")
    assert backend.spot_available(1.0) and "sbatch" not in calls.read_text()
    backend._available = None
    state.write_text("PENDING Resources\n")
    assert not backend.spot_available(2.0)
    backend._available = None
    state.write_text("")
    assert not backend.spot_available(3.0)             # no job of ours: the probe (busy: a year away)
    assert not backend.spot_available(4.0)             # 1 s of trace later: the same answer, no new probe
    assert calls.read_text().split().count("sbatch") == 1
