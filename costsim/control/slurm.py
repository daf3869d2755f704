"""Backend `slurm`: the two markets are partitions of a real Slurm, and Slurm itself preempts.

Each instance is a batch job on partition `spot` or `on-demand` running `runner execute` (sbatch,
squeue, sinfo, scontrol and scancel are called with argument lists, never a shell string; the job's
batch script is a fixed two-line `exec "$@"` and the runner's command line comes after it as
arguments). The controller learns from Slurm, not from its own bookkeeping:

- capacity: `sbatch --test-only` of the job as it would be submitted (its nodes and GPUs, from the
  plan) says it would start now, or the job itself runs there; Slurm never says when capacity comes
  back, so the policy is told to look again (spot_available_at = now + RECHECK_S), never "not again";
- a preemption: the job's `PreemptTime` (`scontrol show job`) is set; Slurm sends the batch shell
  (the runner) SIGTERM at once (`--signal=B:TERM` with `preempt_send_user_signal`), cancels the job
  after the partition's `GraceTime`, and the job ends PREEMPTED (or FAILED with the runner's exit 75);
- the end of a job: its state leaves PENDING/RUNNING/COMPLETING. A `scontrol` that fails or times out
  is retried and logged; only "Invalid job id" (past MinJobAge) reads as the job gone.

Jobs are sized from the plan: `--nodes` and `--gpus-per-node` for a GPU plan; the CPU drill's plan
(gpu `cpu`) on the one-host cluster keeps its CPU sizes. The partitions are options
(`--spot-partition`, `--on-demand-partition`), recorded in the journal.

With `--reclaim-trace`, a drill takes capacity away for real: while the trace says spot is gone, a
job on partition `reclaim` (higher priority tier) holds the CPUs a spot job needs, and Slurm preempts
whatever spot job is in the way. scripts/slurm_control_cluster.sh builds this cluster on one host.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from costsim.control.backend import Status, runner_argv
from costsim.control.local import TraceCapacity
from costsim.errors import InputError
from costsim.io.files import write_atomic
from costsim.spec import ON_DEMAND, SPOT

PARTITIONS = {SPOT: "spot", ON_DEMAND: "on-demand"}   # the defaults (--spot-partition, --on-demand-partition)
RECLAIM_PARTITION = "reclaim"
RECHECK_S = 60.0          # trace seconds after which an unavailable spot partition is looked at again
PROBE_EVERY_S = 10.0      # wall seconds between capacity probes (squeue + sbatch --test-only)
# Why Slurm holds a pending job when the partition has no room for it now (squeue's %r); any other reason
# (None: not looked at yet, BeginTime, Dependency...) is not the capacity's.
CAPACITY_REASONS = {"Resources", "Priority", "ReqNodeNotAvail", "PartitionNodeLimit", "PartitionTimeLimit",
                    "NodeDown", "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_"
                    "partitions"}
START_SLACK_S = 5.0       # a test-only start this close to now is "now"
RETRIES, RETRY_WAIT_S = 3, 1.0   # a failed or timed-out read-only Slurm command is tried again this often
# The one-host drill cluster's sizes (scripts/slurm_control_cluster.sh): a reclaim job fits beside an
# on-demand job but not beside a spot job.
CPUS = {SPOT: 2, ON_DEMAND: 1, RECLAIM_PARTITION: 3}
COMMANDS = ("sbatch", "squeue", "sinfo", "scontrol", "scancel")
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "PREEMPTED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
         "DEADLINE", "REVOKED", "SPECIAL_EXIT"}
# The job's batch script: fixed text, the runner's command line after it as arguments (no shell string).
# One node: the runner is the batch shell (Slurm's signals reach it). Several: srun starts one runner a node
# (each reads SLURM_NODEID and SLURM_NNODES), the first node's address hosts the rendezvous, and srun
# passes the batch shell's signals (a preemption's, the controller's move) on to every node's runner.
BATCH = """#!/bin/sh
# costsim control: the runner's command line comes as arguments (no shell string); one runner a node
if [ "${SLURM_NNODES:-1}" -gt 1 ]; then
  first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
  MASTER_ADDR=$(scontrol show node "$first" -o | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p')
  MASTER_PORT=$((20000 + ${SLURM_JOB_ID:-0} % 20000))
  export MASTER_ADDR MASTER_PORT
  exec srun --kill-on-bad-exit=0 --ntasks-per-node=1 "$@"
fi
exec "$@"
"""


def _run(argv: list[str], check: bool = True) -> str:
    result = _attempts(argv)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])}: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def _attempts(argv: list[str], tries: int = RETRIES) -> subprocess.CompletedProcess:
    """A Slurm command, tried again (and logged) when it fails or times out: a busy controller is not
    an answer. A timeout on the last try reads as a failed command (returncode 124)."""
    for attempt in range(1, tries + 1):
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            result = subprocess.CompletedProcess(argv, 124, "", f"{argv[0]} timed out after 60 s")
        if result.returncode == 0 or _invalid_job(result) or attempt == tries:
            return result
        print(f"costsim control: {' '.join(argv[:3])} failed ({(result.stderr or result.stdout).strip()[:200]}); "
              f"trying again ({attempt}/{tries - 1})", file=sys.stderr, flush=True)
        time.sleep(RETRY_WAIT_S)
    raise AssertionError("unreachable")


def _invalid_job(result: subprocess.CompletedProcess) -> bool:
    return "Invalid job id" in (result.stderr or "") + (result.stdout or "")


def start_time(test_only_output: str) -> dt.datetime | None:
    """When `sbatch --test-only` says the job would start ('Job N to start at 2026-12-01T09:23:23 ...')."""
    match = re.search(r"to start at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", test_only_output)
    return dt.datetime.fromisoformat(match.group(1)) if match else None


def job_state(show_job_output: str, result_code: int) -> dict[str, str]:
    """`scontrol show job ID -o`'s fields; {"JobState": "GONE"} for an unknown id (past MinJobAge) and
    {"JobState": "UNKNOWN"} when Slurm did not answer (the job is not taken as ended)."""
    if "Invalid job id" in show_job_output:
        return {"JobState": "GONE"}
    if result_code != 0 or "JobId=" not in show_job_output:
        return {"JobState": "UNKNOWN"}
    return _fields(show_job_output)


def check_slurm(reclaim: bool = False, partitions: dict[str, str] | None = None) -> float:
    """The commands and partitions are there (else one line: InputError); returns the spot partition's
    GraceTime, the notice Slurm gives."""
    partitions = partitions or PARTITIONS
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        raise InputError("--backend", "backend", f"slurm: {', '.join(missing)} not found on PATH (is this a Slurm "
                         "login node? scripts/slurm_control_cluster.sh up makes a one-host Slurm)")
    grace = None
    for name in [*partitions.values(), *([RECLAIM_PARTITION] if reclaim else [])]:
        result = subprocess.run(["scontrol", "show", "partition", name, "-o"], capture_output=True, text=True,
                                timeout=60)
        if result.returncode != 0 or f"PartitionName={name}" not in result.stdout:
            raise InputError("--backend", "backend", f"slurm: no partition {name!r} "
                             f"({(result.stderr or result.stdout).strip() or 'scontrol says nothing'}); "
                             "name yours with --spot-partition and --on-demand-partition; "
                             "scripts/slurm_control_cluster.sh up makes spot, on-demand and reclaim")
        if name == partitions[SPOT]:
            grace = float(_fields(result.stdout).get("GraceTime", "0") or 0)
    return grace or 0.0


def _fields(text: str) -> dict[str, str]:
    """KEY=VALUE tokens of `scontrol show ... -o` (values without spaces are all we read)."""
    return {m.group(1): m.group(2) for m in re.finditer(r"(\w+)=(\S*)", text)}


def job_size(gpu: str, gpus_per_node: int, nodes: int, market: str) -> list[str]:
    """sbatch's size of one instance: the plan's nodes and GPUs (the CPU drill: its CPU sizes a node)."""
    if gpu.lower() == "cpu":
        return ["--nodes", str(nodes), "--ntasks-per-node", "1", "--cpus-per-task", str(CPUS[market])]
    return ["--nodes", str(nodes), "--ntasks-per-node", "1", "--gpus-per-node", str(gpus_per_node)]


class SlurmBackend:
    name = "slurm"
    markets: tuple[str, ...] = (SPOT, ON_DEMAND)
    foresight = False   # Slurm says whether there is capacity now, never when it comes back

    def __init__(self, reclaim: TraceCapacity | None, *, plan: Path, run_dir: Path, run_id: str,
                 runner_args: list[str], partitions: dict[str, str] | None = None,
                 size: tuple[str, int, int] = ("cpu", 1, 1)):
        self.reclaim, self.plan, self.run_dir, self.run_id, self.runner_args = (reclaim, plan, run_dir, run_id,
                                                                               runner_args)
        self.partitions = dict(partitions or PARTITIONS)
        self.size = size   # (gpu, GPUs per node, nodes) of the plan
        self.script = run_dir / "slurm-job.sh"
        if not self.script.exists() or self.script.read_text() != BATCH:
            write_atomic(self.script, BATCH)
        self.reclaim_name = f"costsim-reclaim-{run_id}"
        self._reclaim_job = self._find_reclaim()
        self._available: tuple[float, bool, float] | None = None   # (trace t, answer, monotonic time)

    # -- capacity ------------------------------------------------------------------------
    def spot_available(self, t: float) -> bool:
        """Whether a spot job would run now. Our own job on the spot partition answers for itself (running:
        yes; pending: by why Slurm holds it, since a probe would only queue behind it); else a probe, at
        most every PROBE_EVERY_S of wall time (each is a squeue and an sbatch --test-only, which runs the
        scheduler: a shared cluster's admins do not want them twice a second). Our own starts, stops and
        reclaim jobs look again at once."""
        now = time.monotonic()
        if self._available is not None and (self._available[0] == t or now - self._available[2] < PROBE_EVERY_S):
            return self._available[1]
        ours = _run(["squeue", "-h", "-p", self.partitions[SPOT], "-n", self._job_name(), "-o", "%T %r"],
                    check=False).split()
        if ours[:1] == ["RUNNING"]:
            available = True
        elif ours[:1] == ["PENDING"]:
            available = (ours[1] if len(ours) > 1 else "None") not in CAPACITY_REASONS
        else:
            available = self._would_start_now(SPOT)
        self._available = (t, available, now)
        return available

    def _would_start_now(self, market: str) -> bool:
        """`sbatch --test-only` of the instance as it would be submitted: Slurm's own scheduler, GRES,
        pending jobs of higher tiers and all, says whether it would start now."""
        result = _attempts(["sbatch", "--test-only", "--partition", self.partitions[market], *self._size(market),
                            "--wrap", "true"])
        when = start_time(result.stderr + result.stdout)
        return when is not None and when <= dt.datetime.now() + dt.timedelta(seconds=START_SLACK_S)

    def _size(self, market: str) -> list[str]:
        return job_size(*self.size, market)

    def spot_available_at(self, t: float) -> float:
        """Now, or: look again in a while (Slurm never says when capacity comes back; it may)."""
        return t if self.spot_available(t) else t + RECHECK_S

    def next_due(self, t: float, handle: dict | None) -> float:
        """A drill's next reclaim change; Slurm's own events are seen at the polls."""
        return self.reclaim.next_change(t) if self.reclaim is not None else math.inf

    def duties(self, t: float, handle: dict | None) -> None:
        """A drill's reclaim jobs: one held while the trace says capacity is gone."""
        if self.reclaim is None:
            return
        gone = not self.reclaim.available(t)
        if gone and self._reclaim_job is None:
            self._reclaim_job = _run(["sbatch", "--parsable", "--partition", RECLAIM_PARTITION, "--job-name",
                                      self.reclaim_name, "--cpus-per-task", str(CPUS[RECLAIM_PARTITION]),
                                      "--output", "/dev/null", str(self.script), "sleep", "infinity"]).strip()
            self._available = None
        elif not gone and self._reclaim_job is not None:
            _run(["scancel", self._reclaim_job], check=False)
            self._reclaim_job = None
            self._available = None

    def _find_reclaim(self) -> str | None:
        """A reclaim job a killed controller left (found by name: the journal is not the source)."""
        if self.reclaim is None:
            return None
        ids = _run(["squeue", "-h", "-n", self.reclaim_name, "-o", "%i"], check=False).split()
        return ids[0] if ids else None

    # -- instances -----------------------------------------------------------------------
    def _job_name(self) -> str:
        return f"costsim-{self.run_id}"

    def start(self, market: str, t: float) -> dict:
        argv = ["sbatch", "--parsable", "--partition", self.partitions[market], "--job-name", self._job_name(),
                *self._size(market), "--no-requeue", "--signal=B:TERM@60",
                "--open-mode=append", "--output", str(self.run_dir / "slurm-%j.out"), "--chdir", str(self.run_dir),
                str(self.script), *runner_argv(self.plan, self.run_dir, self.run_id, market, self.runner_args)]
        job = _run(argv).strip().split(";")[0]
        self._available = None
        return {"job": job, "partition": self.partitions[market], "submitted": round(t, 3)}

    def _state(self, handle: dict) -> dict[str, str]:
        result = _attempts(["scontrol", "show", "job", handle["job"], "-o"])
        return job_state(result.stdout + result.stderr, result.returncode)

    def poll(self, handle: dict, t: float) -> Status:
        state = self._state(handle)
        job_state = state.get("JobState", "GONE")
        if state.get("PreemptTime", "None") not in ("None", "") and "noticed" not in handle:
            handle["noticed"] = round(t, 3)   # Slurm has begun to preempt: the runner has its SIGTERM
        if job_state == "UNKNOWN":   # Slurm did not answer (logged): the instance is held as it was
            return Status(ended=False)
        if job_state == "RUNNING" and "running" not in handle:
            handle["running"] = round(t, 3)
        if job_state == "PENDING" and "running" not in handle and handle["partition"] == self.partitions[SPOT] \
                and not self.spot_available(t):
            # The capacity went between the look and the request: withdraw it (nothing ran, nothing billed).
            _run(["scancel", handle["job"]], check=False)
            return Status(ended=True, end_s=handle["submitted"], withdrawn=True)
        if job_state not in ENDED and job_state != "GONE":
            return Status(ended=False)
        code = state.get("ExitCode", "").split(":")[0]
        handle["state"] = job_state
        self._available = None   # our job left the partition: what it held may be free, or taken
        return Status(ended=True, exit_code=int(code) if code.isdigit() else None,
                      preempted=job_state == "PREEMPTED" or "noticed" in handle)

    def stop(self, handle: dict) -> None:
        """The policy moved on: SIGTERM to the batch shell (the runner), which checkpoints and exits."""
        _run(["scancel", "--batch", "--signal=TERM", handle["job"]], check=False)

    def kill(self, handle: dict) -> None:
        _run(["scancel", "--signal=KILL", "--full", handle["job"]], check=False)

    def log_of(self, handle: dict) -> Path:
        return self.run_dir / f"slurm-{handle['job']}.out"

    def alive(self, handle: dict) -> bool:
        return self._state(handle).get("JobState", "GONE") not in ENDED | {"GONE", "UNKNOWN"}

    def close(self) -> None:
        if self._reclaim_job is not None:
            _run(["scancel", self._reclaim_job], check=False)
            self._reclaim_job = None
