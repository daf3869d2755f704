"""The supervisor: launch torchrun, restart from the last checkpoint after a preemption or a
failure (until done or out of restarts), inject drill faults, and write the run's summary."""

from __future__ import annotations

import datetime
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from costsim.contract.job import fingerprint
from costsim.contract.jsonfiles import write_atomic
from costsim.contract.lives import lives
from costsim.contract.plan import Plan, RunSection
from costsim.contract.telemetry import CURRENT_PLAN, PLAN, SUMMARY, moved_since, read_events, read_job_events
from runner import faults, layout, resume_check
from runner.launch import Node, TorchrunReportFilter, torchrun_argv
from runner.plan import RunSpec
from runner.telemetry import Telemetry, process_start_t

MAX_FAILURES_WITHOUT_PROGRESS = 3


@dataclass(kw_only=True)
class Execution:
    spec: RunSpec
    node: Node
    run_dir: Path
    run_id: str
    nproc_per_node: int
    schedule: list[faults.Fault] = field(default_factory=list)
    max_restarts: int = 10
    min_nodes: int | None = None     # elastic: go on with as few as this many nodes


def default_run_id(env=os.environ) -> str:
    return (env.get("SKYPILOT_TASK_ID") or env.get("SLURM_JOB_ID")
            or datetime.datetime.now().strftime("%Y%m%d-%H%M%S-") + str(os.getpid()))


def prepare_run_dir(run_dir: Path, effective: Plan, *, changes: tuple[str, ...] = (), run_id: str = "") -> Path:
    """Make the run folder, prove the checkpoint folder writable, and write the plans: RUN/plan.json
    once, the job's (with its fingerprint; an accepted change keeps the earlier one beside it), and
    RUN/current-plan.json, the effective plan (runner.plan.effective_plan) this execute's workers
    read; returns the latter's path. costsim.contract.job.check_binding has said the plan may run here."""
    from runner.store import checkpoint_place
    checkpoints = checkpoint_place(run_dir, effective.checkpoint.location)[0]
    try:
        checkpoints.mkdir(parents=True, exist_ok=True)
        probe = checkpoints / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise PermissionError(f"{checkpoints}: checkpoint folder is not writable ({exc.strerror or exc})") from None
    job = run_dir / PLAN
    if changes and job.exists():
        superseded = _free_name(run_dir / "superseded-plans", "plan")
        superseded.parent.mkdir(exist_ok=True)
        job.rename(superseded)
        telemetry = Telemetry(run_dir, run_id, rank=None, world_size=None)
        telemetry.event("plan_changed", changes=list(changes), superseded=str(superseded.relative_to(run_dir)))
        telemetry.close()
    if not job.exists():
        replace(effective, run=replace(effective.run or RunSection(), fingerprint=fingerprint(effective))).write(job)
    return effective.write(run_dir / CURRENT_PLAN)


def _free_name(folder: Path, stem: str) -> Path:
    n = 1
    while (folder / f"{stem}-{n}.json").exists():
        n += 1
    return folder / f"{stem}-{n}.json"


class Supervisor:
    def __init__(self, execution: Execution, leases: list | None = None):
        self.x = execution
        self.leases = leases or []   # runner.lease: node 0's hold on the run folder and on a store prefix
        self.telemetry = Telemetry(execution.run_dir, execution.run_id, rank=None, world_size=None)
        self.telemetry.base["node"] = execution.node.node_rank
        self.notice = False
        self.notice_t: float | None = None
        self.child: subprocess.Popen | None = None
        # The notice is written down as it comes, not only at the exit: a reclaim can kill a runner whose
        # workers are slow to leave (or still starting) before it writes `exit`, and the life then still runs
        # to its notice. A thread writes it, woken through a pipe: the handler may interrupt the main thread
        # while it holds any lock (the telemetry's, an Event's), and os.write takes none.
        self._wake_r, self._wake_w = os.pipe()
        self._finishing = False

    def _on_sigterm(self, signum, frame) -> None:
        # A notice for this node: pass it on to the workers themselves (faults.notify_workers says
        # why not through torchrun); they checkpoint and exit, and torchrun with them.
        if not self.notice:   # the first notice's arrival (a second one, even inside this handler, sets nothing)
            self.notice, self.notice_t = True, time.time()
            os.write(self._wake_w, b"n")
        if self.child is not None and self.child.poll() is None:
            faults.notify_workers(self.child.pid)

    def _on_lease_lost(self, where: str, holder) -> None:
        """Another runner took the folder (or the store prefix) over (this one was thought dead): stop the
        workers before they write again (SIGKILL: a checkpoint being written stays a partial folder, never
        loaded)."""
        print(f"runner: {where} was taken over by {holder.describe(time.time())}: "
              "stopping this runner's workers without writing", file=sys.stderr, flush=True)
        child = self.child
        if child is not None and child.poll() is None:
            for pid in faults.children(child.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            child.kill()

    def _worker_args(self, fault: faults.Fault | None) -> list[str]:
        """Where the effective plan is, and this attempt's drill fault: the workers read the rest there."""
        x = self.x
        args = ["--plan", str(x.run_dir / CURRENT_PLAN), "--run-dir", str(x.run_dir), "--run-id", x.run_id]
        return args + (["--fault", fault.encode()] if fault else [])

    def run(self) -> int:
        """Attempts until the job ends; returns the exit status for `runner execute`."""
        x, started = self.x, time.time()
        self._notice_writer = threading.Thread(target=self._write_notice, args=(started,), name="notice", daemon=True)
        self._notice_writer.start()
        signal.signal(signal.SIGTERM, self._on_sigterm)
        for lease in self.leases:
            lease.start(functools.partial(self._on_lease_lost, lease.where))
        resume_check.remove_stale(x.run_dir)
        # The instance's life as the market sees it (costsim calibrate --market): from here to `exit`.
        self.telemetry.event("instance", offering=x.spec.offering, market=x.spec.market, host=socket.gethostname(),
                             process_start_t=process_start_t())
        pending = list(x.schedule)
        attempts: list[dict] = []
        where = x.spec.checkpoint_location
        restarts, stuck, newest = 0, 0, newest_checkpoint(x.run_dir, where)
        while True:
            if self.notice:   # a notice that came between two attempts: the node is going, start nothing
                self._finish(started, attempts, restarts, status="preempted")
                return faults.PREEMPTED_EXIT
            fault = pending[0] if pending else None
            attempt_start = time.time()
            argv = torchrun_argv(x.node, nproc_per_node=x.nproc_per_node, run_id=x.run_id,
                                 worker_args=self._worker_args(fault), min_nodes=x.min_nodes)
            self.telemetry.event("launch", attempt=len(attempts), fault=fault.encode() if fault else None)
            check = self._resume_check()
            self.child = subprocess.Popen(argv, env={**_child_env(x), **check.env}, stderr=subprocess.PIPE)
            if self.notice:   # it came while the attempt was being started: pass it on now
                faults.notify_workers(self.child.pid)
            stderr = threading.Thread(target=TorchrunReportFilter(sys.stderr.buffer).pump, args=(self.child.stderr,),
                                      name="stderr", daemon=True)
            stderr.start()
            code = self.child.wait()
            stderr.join(timeout=5.0)   # a worker torchrun left behind may hold the pipe open
            self.child = None
            check.close(wait=not self.notice)   # a notice: the exit does not wait for a fetch under way
            if any(lease.lost.is_set() for lease in self.leases):   # another runner holds the folder now
                return 1   # nothing more is written: the folder is the new holder's
            events = [e for e in read_events(x.run_dir) if e["t"] >= attempt_start]
            attempts.append({"exit_code": code, "started": attempt_start, "ended": time.time()})
            if any(e["event"] == "end" for e in events):
                return self._finish(started, attempts, restarts, status="done")
            fatal = next((e for e in events if e["event"] == "fatal"), None)
            if fatal is not None:   # a configuration error or out of memory: restarting cannot help
                kind = fatal.get("kind", "configuration")
                self._finish(started, attempts, restarts, status="failed", reason=kind)
                print(f"runner: not restarting: {fatal['reason']}", file=sys.stderr)
                return 2 if kind == "configuration" else 1   # out of memory or disk: the job failed
            fired = {e["step"] for e in events
                     if e["event"] == "preempted" and str(e.get("kind", "")).startswith("injected")}
            pending = [f for f in pending if f.step not in fired]
            if self.notice:
                self._finish(started, attempts, restarts, status="preempted")
                return faults.PREEMPTED_EXIT
            reason = "preempted" if any(e["event"] == "preempted" for e in events) else "failed"
            # A failure that recurs with no new checkpoint (out of memory, a bug) will not go away by
            # restarting: paying for the same start-up again is waste.
            now = newest_checkpoint(x.run_dir, where)
            progressed, newest = now > newest, max(newest, now)
            stuck = 0 if reason == "preempted" or progressed else stuck + 1
            if stuck >= MAX_FAILURES_WITHOUT_PROGRESS:
                self._finish(started, attempts, restarts, status="failed")
                print(f"runner: the job failed {stuck} times in a row without a new checkpoint (last exit {code}); "
                      "not restarting: see the workers' errors above", file=sys.stderr)
                return 1
            if restarts >= x.max_restarts:
                self._finish(started, attempts, restarts, status="failed")
                print(f"runner: giving up after {restarts} restarts (last exit {code})", file=sys.stderr)
                return 1
            restarts += 1
            self.telemetry.event("restart", attempt=len(attempts), restarts=restarts, reason=reason, exit_code=code)
            print(f"runner: restart {restarts}: {reason} (torchrun exit {code}); resuming from the last checkpoint",
                  file=sys.stderr, flush=True)

    def _resume_check(self) -> resume_check.Precheck:
        """The check of this node's newest checkpoints for the launch, begun now, beside torchrun's start
        (runner.resume_check). On one node only: on several, rank 0's node is the rendezvous's choice, and
        every node's supervisor would read the shared folder's checkpoint whole. With an object store, a newer
        checkpoint there is fetched into memory in the same thread (resume_check.prefetch; not with
        COSTSIM_S3_PREFETCH=0)."""
        from runner import layout
        from runner.store import checkpoint_place
        x = self.x
        root, store = checkpoint_place(x.run_dir, x.spec.checkpoint_location) if x.node.nnodes == 1 else (None, None)
        if not resume_check.PREFETCH:
            store = None
        memory = layout.memory_folder(root) if root is not None and store is not None else None

        def done(doc: dict) -> None:
            verdicts = doc.get("verdicts") or []
            fetched = doc.get("fetched") or {}
            self.telemetry.event("resume_check", duration_s=doc.get("duration_s"), error=doc.get("error"),
                                 step=next((v["step"] for v in verdicts if v["problem"] is None), 0),
                                 checked=[v["step"] for v in verdicts],
                                 fetched=fetched.get("step") if "folder" in fetched else None,
                                 fetch_skipped=fetched.get("skipped") or fetched.get("problem") or fetched.get("error"))
            if "folder" in fetched:
                self.telemetry.event("checkpoint_fetch", step=fetched["step"], duration_s=fetched["duration_s"],
                                     bytes=fetched["bytes"], location=fetched["location"], into="memory",
                                     threads=fetched["threads"], by="supervisor")
        return resume_check.Precheck(root, x.run_dir, on_done=done, store=store, memory=memory)

    def _write_notice(self, started: float) -> None:
        os.read(self._wake_r, 1)   # the notice, or the exit
        if not self._finishing:   # how this life ends if the reclaim comes before `exit` (the exit's own word wins)
            moved = moved_since(self.x.run_dir, started)
            self.telemetry.event("notice", ended=instance_end("preempted", self.x.spec.market, moved=moved))

    def _finish(self, started: float, attempts: list, restarts: int, status: str, reason: str | None = None) -> int:
        self._finishing = True   # the notice is written by now or goes into `exit` (notice_t): never after close
        os.write(self._wake_w, b"f")
        self._notice_writer.join()
        ended = instance_end(status, self.x.spec.market, moved=moved_since(self.x.run_dir, started))
        self.telemetry.flush()   # this life's last lines, for the summary's count of the job's lives
        summary = summarise(self.x.run_dir, run_id=self.x.run_id, wall_s=time.time() - started, status=status,
                            attempts=attempts, reason=reason, ending=ended)
        # Every node's supervisor summarises; on shared storage only node 0 owns summary.json.
        name = SUMMARY if self.x.node.node_rank == 0 else f"summary.node-{self.x.node.node_rank}.json"
        write_atomic(self.x.run_dir / name, json.dumps(summary, indent=2) + "\n")
        self.telemetry.event("exit", status=status, restarts=restarts, ended=ended, notice_t=self.notice_t)
        self.telemetry.close()
        if self.x.node.node_rank == 0:
            share_life(self.x.run_dir, self.x.spec.checkpoint_location)
        drop_fetched(self.x.run_dir, self.x.spec.checkpoint_location)
        return 0 if status == "done" else 1


def share_life(run_dir: Path, location: str | None) -> None:
    """With an s3:// checkpoint store, this run folder's telemetry (the life just ended with it) goes to the
    store for the job's other nodes (costsim.contract.telemetry.read_job_events); a store that is out is
    said in a line."""
    from runner.store import StoreError, checkpoint_place
    store = checkpoint_place(run_dir, location)[1]
    if store is None:
        return
    try:
        store.upload_telemetry(run_dir)
    except StoreError as exc:
        print(f"runner: warning: {exc}: this life's record stays in {run_dir} only", file=sys.stderr, flush=True)


def drop_fetched(run_dir: Path, location: str | None) -> None:
    """A checkpoint a worker fetched into memory and did not load (it was killed first) is not left
    holding the node's memory once this runner is done."""
    from runner.store import checkpoint_place, is_store
    if is_store(location) and (held := layout.memory_folder(checkpoint_place(run_dir, location)[0])) is not None:
        shutil.rmtree(held, ignore_errors=True)


def instance_end(status: str, market: str, *, moved: bool = False) -> str:
    """Why the instance's life ended (INSTANCE_ENDS): a notice the controller gave is a move; a notice on
    spot otherwise is the market's reclaim; elsewhere someone stopped it."""
    if status == "done":
        return "finished"
    if status == "preempted":
        if moved:
            return "moved"
        return "preempted-notice" if market == "spot" else "cancelled"
    return "failed"



def newest_checkpoint(run_dir: Path, location: str | None = None) -> int:
    """The newest committed step in the run's local checkpoint folder (0 when none)."""
    from runner.store import checkpoint_place
    return max(layout.saved_steps(checkpoint_place(run_dir, location)[0]), default=0)


def _child_env(x: Execution) -> dict:
    env = dict(os.environ)
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    # Workers forked from torchrun's agent after its imports (runner.torchrun) where the plan runs on CPUs; GPU
    # plans start theirs as new interpreters: forked, they were ready no sooner on the H200 (docs/runner-speed.md)
    env.setdefault("COSTSIM_WORKER_START", "fork" if x.spec.cpu else "exec")
    from runner.workerenv import bytecode_env, worker_env
    return bytecode_env(x.run_dir, worker_env(x.spec.runtime, x.run_dir, env))


SPLIT_FIELDS = ("world_size", "micro_batch", "accumulation")


def summarise(run_dir: Path, *, run_id: str, wall_s: float, status: str, attempts: list,
              reason: str | None = None, ending: str | None = None) -> dict:
    """The run's summary, read off its telemetry. Each attempt carries the batch split it ran with
    (world size, micro-batch, accumulation); the run's own fields are its last attempt's."""
    events = read_job_events(run_dir)   # the job's: this folder's lives and its other nodes' (an s3:// store's)
    job = lives(events)
    if ending is not None and job.lives:   # this life, whose `exit` is written after the summary
        job.lives[-1].ended, job.lives[-1].ended_t = ending, time.time()
    end = next((e for e in reversed(events) if e["event"] == "end"), None)
    saves = [e for e in events if e["event"] == "checkpoint_save" and e.get("rank") == 0]
    steps = [e for e in events if e["event"] == "step"]
    splits = [e for e in events if e["event"] == "runtime" and e.get("rank") == 0 and "micro_batch" in e]
    for attempt in attempts:
        ran = [e for e in splits if attempt["started"] <= e["t"] <= attempt["ended"]]
        if ran:
            attempt.update({k: ran[-1][k] for k in SPLIT_FIELDS})
    last = splits[-1] if splits else {}
    return {
        "run": run_id, "status": status, **({"reason": reason} if reason else {}), "wall_s": wall_s,
        **{k: last.get(k) for k in SPLIT_FIELDS},
        "final_loss": end.get("final_loss") if end else None,
        "steps": end["step"] if end else max((e["step"] for e in steps), default=0),
        "samples": end["samples"] if end else sum(e.get("samples", 0) for e in steps),
        # the job's, over every life (costsim.contract.lives); `attempts` are this life's
        "restarts": job.restarts, "lost_steps": job.lost_steps, "job": job.totals(),
        "lives": [life.as_dict() for life in job.lives],
        "checkpoint_stall_s": sum(e.get("stall_s", 0.0) for e in saves),
        "checkpoint_saves": len(saves),
        "final_state_sha256": end.get("final_state_sha256") if end else None,
        "attempts": attempts,
    }
