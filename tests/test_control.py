"""costsim control: the controller decides what the simulator decides; bad input; the real local drill."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from costsim import policies
from costsim.contract.plan import Plan
from costsim.control.backend import Status
from costsim.control.controller import Controller, PlanFigures
from costsim.control.journal import Instance, Journal, Lock
from costsim.control.local import LocalBackend, TraceCapacity
from costsim.control.progress import Progress
from costsim.io.specs import load_trace
from costsim.sim.job import JobParams
from costsim.sim.market import TraceTimeline
from costsim.sim.trial import MarketPrice, run_trial
from tests.runner_helpers import drill_priority

ROOT = Path(__file__).resolve().parents[1]
WINDOWS = ROOT / "data" / "traces" / "cbl-us-west-2a-v100"
H = 3600.0


class VirtualClock:
    """Trace time that moves only when the controller sleeps (scale 1, epoch = trace time)."""

    def __init__(self):
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, t)

    def wall(self, t: float) -> float:
        return t

    def trace(self, epoch: float) -> float:
        return epoch


class VirtualJobs:
    """The runner's behaviour in virtual time, for the local backend in place of processes: a start-up
    (and a restart after the first start), a step every `step_s`, a synchronous save of `checkpoint_s`
    every `interval_s` of training and at the end, on a notice an emergency save and the exit, after a
    kill the last save's state, and the job's exit (`release_s`) after its last save."""

    def __init__(self, clock: VirtualClock, *, total_steps: int, step_s: float, startup_s: float, interval_s: float,
                 checkpoint_s: float = 0.0, restart_s: float = 0.0, release_s: float = 0.0):
        self.clock, self.total, self.step_s, self.startup_s = clock, total_steps, step_s, startup_s
        self.checkpoint_s, self.restart_s, self.release_s = checkpoint_s, restart_s, release_s
        self.per_checkpoint = round(interval_s / step_s)
        self.durable = 0
        self.starts = 0
        self.job: dict | None = None
        self.progress = Progress(step_times=[step_s], first_steps=[startup_s],
                                 save_s=[checkpoint_s] if checkpoint_s else [])

    # what the job has done by time t: (steps, steps in its last complete save)
    def _at(self, job: dict, t: float) -> tuple[int, int]:
        cycle = self.per_checkpoint * self.step_s + self.checkpoint_s
        elapsed = max(0.0, t - job["begin"])
        full = math.floor(elapsed / cycle + 1e-9)
        rest = elapsed - full * cycle
        steps = job["from"] + full * self.per_checkpoint + min(self.per_checkpoint,
                                                                math.floor(rest / self.step_s + 1e-9))
        return min(steps, self.total), min(job["from"] + full * self.per_checkpoint, self.total)

    def _work_end(self, job: dict) -> float:
        """When its last step ends (saves on the way included; the final save follows)."""
        left = self.total - job["from"]
        return job["begin"] + left * self.step_s + (math.ceil(left / self.per_checkpoint) - 1) * self.checkpoint_s

    def start(self, market: str) -> dict:
        t = self.clock.now()
        restart = self.restart_s if self.starts else 0.0
        self.starts += 1
        self.job = {"from": self.durable, "begin": t + self.startup_s + restart, "exit": None}
        return {"pid": id(self.job)}

    def _settle(self) -> None:
        job = self.job
        if job is not None and job["exit"] is None:
            saved = self._work_end(job) + self.checkpoint_s   # the final save
            if self.clock.now() >= saved - 1e-9:
                self.durable, job["exit"], job["ended"] = self.total, (saved + self.release_s, 0), saved

    def exit_code(self, handle: dict) -> tuple[bool, int | None]:
        self._settle()
        job, t = self.job, self.clock.now()
        if job["exit"] is None:
            return False, None
        return job["exit"][0] <= t + 1e-9, job["exit"][1]

    def alive(self, handle: dict) -> bool:
        return self.job is not None and self.job["exit"] is None

    def notify(self, handle: dict) -> None:
        """The notice (or the controller's move): an emergency save of what it has done, then the exit."""
        job, t = self.job, self.clock.now()
        if job["exit"] is None:
            steps = self._at(job, t)[0] if t >= job["begin"] else job["from"]
            job["exit"] = (t + self.checkpoint_s + self.release_s, 75)
            job["saving"] = (t + self.checkpoint_s, steps)

    def kill(self, handle: dict) -> None:
        job, t = self.job, self.clock.now()
        saving = job.get("saving")
        if saving is not None and saving[0] <= t + 1e-9:
            self.durable = saving[1]   # the emergency save finished before the reclaim
        elif job["exit"] is None or saving is not None:
            self.durable = self._at(job, t)[1] if t >= job["begin"] else job["from"]
        if job["exit"] is None or job["exit"][0] > t:
            job["exit"] = (t, -9)

    def close(self) -> None:
        pass

    log = Path("virtual.log")

    def observe(self) -> Progress:
        """What the run folder would say now."""
        self._settle()
        job, t, p = self.job, self.clock.now(), self.progress
        if job is None:
            return p
        saving = job.get("saving")
        if saving is not None and saving[0] <= t + 1e-9 and not job.get("told"):
            self.durable = max(self.durable, saving[1])
            p.notice_saved_at.append(saving[0])   # its checkpoint_save event (reason notice)
            job["told"] = True
        live = job["exit"] is None and t >= job["begin"]
        steps, saved = self._at(job, t) if live else (self.durable, self.durable)
        p.step, p.checkpoint_step = steps, max(self.durable, saved)
        p.step_t = p.stepped_t = t if live else None
        p.done = self.durable >= self.total
        if p.done and "ended" in job:
            p.end_t = job["ended"]
        return p


def controlled(ticks, gap_s, policy, *, total_steps, step_s, startup_s, interval_s, deadline_s, notice_s, poll_s,
               checkpoint_s=0.0, restart_s=0.0, release_s=0.0, run_dir: Path | None = None):
    """The controller on the virtual job; `run_dir` takes what it writes there (a move's word), a
    temporary folder by default."""
    import tempfile
    run_dir = run_dir or Path(tempfile.mkdtemp(prefix="virtual-run-"))
    clock = VirtualClock()
    jobs = VirtualJobs(clock, total_steps=total_steps, step_s=step_s, startup_s=startup_s, interval_s=interval_s,
                       checkpoint_s=checkpoint_s, restart_s=restart_s, release_s=release_s)
    backend = LocalBackend(TraceCapacity(ticks, gap_s), jobs, notice_s=notice_s)
    journal = Journal(plan_file="-", policy=policy, backend="local", offering="virtual", deadline_s=deadline_s,
                      time_scale=1.0, notice_s=notice_s, t0=0.0)
    figures = PlanFigures(total_steps=total_steps, step_s=step_s, start_s=startup_s, checkpoint_s=checkpoint_s,
                          checkpoint_stall_s=None, interval_s=interval_s, restart_s=startup_s + restart_s,
                          release_s=release_s)

    class Folder:
        observe = staticmethod(jobs.observe)

    # the virtual job's figures are exact: no margin, so that the two decide on the same figures
    controller = Controller(journal, backend, Folder(), clock, policies.get(policy), figures, run_dir=run_dir,
                            poll_s=poll_s, horizon_s=4 * deadline_s, say=lambda line: None, margin=False)
    controller.j.save = lambda run_dir: None   # the journal's file is tested elsewhere
    journal = controller.run()
    journal.report["decisions"] = controller.decisions
    return journal


def simulated(ticks, gap_s, policy, *, total_steps, step_s, startup_s, interval_s, deadline_s, notice_s,
              checkpoint_s=0.0, restart_s=0.0, release_s=0.0):
    params = JobParams(work_s=total_steps * step_s, deadline_s=deadline_s, checkpoint_interval_s=interval_s,
                       checkpoint_s=checkpoint_s, changeover_s=startup_s, restart_s=restart_s, release_s=release_s,
                       notice_s=notice_s, horizon_s=4 * deadline_s)
    prices = {m: MarketPrice(per_hour=1.0) for m in ("spot", "on-demand")}
    return run_trial(params, policies.get(policy), TraceTimeline(ticks, gap_s), prices, record_log=True)


@pytest.mark.parametrize("policy", ["greedy", "uniform-progress"])
def test_controller_makes_the_simulators_decisions_on_real_windows(policy, tmp_path):
    """Can't Be Late's setting (48 h job, 52 h deadline, 0.1 h start-up) with every overhead non-zero, on
    the 100 shipped real windows: the controller, driving the local backend in virtual time, starts the
    same markets in the same order as the simulator, each start within one poll interval and one save of
    the simulator's (the simulator decides after a synchronous save that a wake-up falls in, the
    controller during it), and meets the deadline. For Uniform Progress that offset moves the line's
    crossing by D/(D - C) = 13 times as much, and where a capacity edge falls in between, the two take
    other paths: it may do so in a few windows (8 of these 100), never so that a deadline is missed."""
    poll_s = 60.0
    # every overhead non-zero: start-up, restart, periodic and final saves, the notice, the job's exit
    setting = dict(total_steps=48 * 3600, step_s=1.0, startup_s=0.1 * H, interval_s=H, deadline_s=52 * H,
                   notice_s=120.0, checkpoint_s=60.0, restart_s=300.0, release_s=120.0)
    line = setting["deadline_s"] / (setting["deadline_s"] - setting["total_steps"] * setting["step_s"])
    tolerance_s = (poll_s + setting["checkpoint_s"]) * (line if policy == "uniform-progress" else 1.0)
    switches, parted = 0, []
    for window in range(100):
        ticks, gap_s = load_trace(WINDOWS / f"{window}.json")
        journal = controlled(ticks, gap_s, policy, poll_s=poll_s, run_dir=tmp_path, **setting)
        outcome = simulated(ticks, gap_s, policy, **setting)
        assert journal.status == "done" and outcome.finished
        assert journal.end_s <= setting["deadline_s"] and outcome.met_deadline, window
        ours = [(i.market, i.start_s) for i in journal.instances]
        theirs = [(s.market, s.start_s) for s in outcome.record.stints]
        if [m for m, _ in ours] != [m for m, _ in theirs]:
            parted.append(window)
            continue
        for (_, a), (_, b) in zip(ours, theirs):
            assert abs(a - b) <= tolerance_s + 1e-6, (window, ours, theirs)
        assert abs(journal.end_s - outcome.makespan_s) <= tolerance_s * len(ours) + 1e-6
        switches += sum(1 for x, y in zip(ours, ours[1:]) if x[0] != y[0])
    assert len(parted) <= (0 if policy == "greedy" else 10), parted
    assert switches >= 3   # the windows do make the policy move between markets


def test_journal_round_trips_and_lock_is_exclusive(tmp_path):
    journal = Journal(plan_file="p.json", policy="greedy", backend="local", offering="o", deadline_s=10.0, time_scale=2.0,
                      notice_s=1.0, t0=5.0)
    journal.decide(0.0, "spot", "spot available")
    journal.report = {"cost": 1.5}
    journal.save(tmp_path)
    again = Journal.load(tmp_path)
    assert again.to_dict() == journal.to_dict() and again.report == {"cost": 1.5}
    first = Lock(tmp_path)
    first.acquire()
    from costsim.errors import InputError
    with pytest.raises(InputError, match="held by another live controller"):
        Lock(tmp_path).acquire()
    first.release()
    Lock(tmp_path).acquire()


# -- the command line ------------------------------------------------------------------------------
def _plan(run_cli, tmp_path, workload="tiny-drill") -> Path:
    out = tmp_path / f"{workload}.json"
    assert run_cli("plan", "--workload", workload, "--trials", "20", "--out", str(out)).exit_code == 0
    return out


def test_bad_input_is_one_line_and_starts_nothing(run_cli, tmp_path):
    plan = _plan(run_cli, tmp_path)
    bad_trace = tmp_path / "bad.json"
    bad_trace.write_text("{not json")
    cases = [
        (["--trace", str(bad_trace), "--run-dir", str(tmp_path / "a")], "bad.json"),
        (["--run-dir", str(tmp_path / "b"), "--policy", "greedy"], "--trace"),
        (["--trace", str(WINDOWS / "0.json"), "--policy", "owned", "--run-dir", str(tmp_path / "c")],
         "resources.price_per_node_h"),
        (["--trace", str(WINDOWS / "0.json"), "--time-scale", "0", "--run-dir", str(tmp_path / "d")], "time-scale"),
        (["--trace", str(WINDOWS / "0.json"), "--runtime", "compile=fast", "--run-dir", str(tmp_path / "f")],
         "compile"),
    ]
    for args, names in cases:
        result = run_cli("control", str(plan), *args)
        assert result.exit_code == 2, (args, result.stderr)
        assert names in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not any((tmp_path / x / "telemetry.jsonl").exists() for x in "abcdf")
    # a multi-node count trace that counts fewer instances than the plan's gang cannot say when it had capacity
    four = tmp_path / "four-nodes.json"
    doc = json.loads(plan.read_text())
    doc["resources"]["nodes"] = 4
    four.write_text(json.dumps(doc))
    counts = tmp_path / "counts.json"
    counts.write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": [2, 1, 0, 2] * 50}))
    result = run_cli("control", str(four), "--trace", str(counts), "--run-dir", str(tmp_path / "g"))
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "at most 2 instances" in result.stderr and "a gang of 4 nodes" in result.stderr
    assert not (tmp_path / "g").exists()
    owned = _plan(run_cli, tmp_path, "tiny")
    result = run_cli("control", str(owned), "--policy", "greedy", "--trace", str(WINDOWS / "0.json"),
                     "--run-dir", str(tmp_path / "e"))
    assert result.exit_code == 2 and "policy greedy needs spot, on-demand" in result.stderr


def test_a_run_picked_up_again_refuses_flags_its_journal_disagrees_with(run_cli, tmp_path):
    """A restarted controller keeps its journal's policy, market and clock: flags that say otherwise are
    one line naming each, not silently ignored; the same flags (or none) pick the run up."""
    plan = _plan(run_cli, tmp_path)
    run_dir = tmp_path / "run"
    Journal(plan_file=str(plan.resolve()), policy="uniform-progress", backend="local", offering="drill/local/cpu-2proc",
            deadline_s=16 * H, time_scale=600.0, notice_s=600.0, t0=time.time(),
            trace=str((WINDOWS / "6.json").resolve()), runner_args=["--steps", "24000"], steps=24000).save(run_dir)
    result = run_cli("control", str(plan), "--run-dir", str(run_dir), "--policy", "greedy",
                     "--trace", str(WINDOWS / "7.json"), "--deadline", "16h")
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.stderr
    assert "--policy greedy (the journal: uniform-progress)" in lines[0] and "7.json (the journal:" in lines[0]
    assert "--deadline" not in lines[0]   # 16h is what the journal says
    assert json.loads((run_dir / "control.json").read_text())["policy"] == "uniform-progress"


def test_a_plan_this_host_cannot_run_is_refused_before_anything_is_billed(run_cli, tmp_path):
    """The H200 SDXL plan on this CPU machine: what `runner execute` would refuse, refused before the
    first instance (it used to start the job, fail, and bill the instance)."""
    plan = tmp_path / "sdxl.json"
    assert run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--trials", "20", "--out", str(plan)).exit_code == 0
    result = run_cli("control", str(plan), "--policy", "on-demand", "--run-dir", str(tmp_path / "run"))
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.stderr
    assert "runner execute would refuse" in lines[0] and "H200 GPUs and this node has none" in lines[0]
    assert not (tmp_path / "run" / "control.json").exists() and not (tmp_path / "run" / "telemetry.jsonl").exists()


def test_runner_market_must_be_one_the_plan_prices(run_cli, tmp_path):
    owned = _plan(run_cli, tmp_path, "tiny")
    result = subprocess.run([sys.executable, "-m", "runner", "execute", str(owned), "--market", "spot", "--run-dir",
                             str(tmp_path / "r")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--market 'spot' is not priced by this plan; allowed: owned" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "r" / "telemetry.jsonl").exists()


def test_slurm_backend_without_slurm_is_one_line(run_cli, tmp_path, monkeypatch):
    plan = _plan(run_cli, tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = run_cli("control", str(plan), "--backend", "slurm", "--policy", "on-demand", "--run-dir",
                     str(tmp_path / "s"))
    assert result.exit_code == 2 and "sbatch" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_run_folder_held_by_a_live_controller_is_refused(run_cli, tmp_path):
    plan = _plan(run_cli, tmp_path)
    folder = tmp_path / "held"
    holder = Lock(folder)
    holder.acquire()
    try:
        result = run_cli("control", str(plan), "--policy", "on-demand", "--run-dir", str(folder))
    finally:
        holder.release()
    assert result.exit_code == 2 and "held by another live controller" in result.stderr
    assert not (folder / "telemetry.jsonl").exists()


# -- the real drill: runner processes, checkpoints, restarts ----------------------------------------
DRILL = ["--time-scale", "600", "--notice", "10m", "--poll", "0.1s"]


def _control(plan: Path, run_dir: Path, *args: str, window: int = 6, steps: int = 24000,
             deadline: str = "16h") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "costsim", "control", str(plan), "--run-dir", str(run_dir), *DRILL,
                             "--deadline", deadline, "--trace", str(WINDOWS / f"{window}.json"), "--steps", str(steps),
                             "--format", "json", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=drill_priority)


@pytest.mark.slow
@pytest.mark.solo
@pytest.mark.parametrize("policy", ["greedy", "uniform-progress"])
def test_local_drill_meets_its_deadline_and_bills_what_the_as_known_replay_predicts(run_cli, tmp_path, policy):
    """The tiny-drill job (paced to 5 ms a step) on Can't Be Late window 59 at 600x, 6,000 steps, 14 h: the
    deadline is met, and the bill is within 5% of the as-known replay (the simulator on the same window with
    the job's real starts and step times, each decision on the figures the controller had then), so what is
    left measures the controller (data/measurements/2026-12-01-control-windows: windows nobody tuned on).

    The job's size, deadline and window were chosen in the simulator so that the test does not hinge on
    this machine (`python3 scripts/drill_config.py --steps 6000 --deadline 14h --fast 5.0,5.5,6.5,7.5 --slow 9
    --start 4 --start-spread 0.15` lists window 59): at any step time from the pace's 5 ms to 7.5 ms both
    policies start on spot, are reclaimed at 1.5 h and finish on on-demand, the cost moves less than 5% when
    the start-ups are 15% shorter or longer (the runner's start varies so from start to start, which is
    where a run and its replay can part), and at 9 ms the deadline still holds. The pace is what keeps a
    fast machine in that range (window 6, chosen for the bare MLP at 3.5-6.5 ms, finished before its
    reclaim on a machine that ran it at 2.6 ms). It runs alone (`solo`): beside another worker's DDP runs
    the drill ran 3x slower."""
    plan = _plan(run_cli, tmp_path)
    proc = _control(plan, tmp_path / "run", "--policy", policy, window=59, steps=6000, deadline="14h")
    out, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, err[-3000:]
    doc = json.loads(out)
    assert doc["status"] == "done" and doc["deadline_met"], (doc["finish_s"], doc["instances"], doc["measured"])
    # spot, then on-demand: by the reclaim at 1.5 h, or by a move before it where the controller's margin
    # (a slow machine's spread of step times) said the slack was gone. A machine slower than the drill was sized
    # for may still be running when spot comes back (9.0 h) and, ahead of the line, go back to spot (CI's once
    # did under load): any start after the on-demand one is spot, never another on-demand one
    assert doc["preemptions"] + doc["moves"] >= 1, (doc["instances"], doc["measured"])
    markets = [i["market"] for i in doc["instances"]]
    assert markets[:2] == ["spot", "on-demand"] and set(markets[2:]) <= {"spot"}, markets
    assert abs(doc["error"]["cost_rel"]) <= 0.05, (doc["cost"], doc["predicted"], doc["measured"])
    # The replay and the run can part at a decision on a policy's edge (at 600x a wall second of start-up
    # is 10 min of trace): a short spot start taken in one and not the other. Where they took the same
    # path the finish is within 5%; where they parted, within one start-up as well.
    path = [i["market"] for i in doc["instances"] if i["ended"] != "withdrawn"]
    same_path = path == [stint["market"] for stint in doc["predicted"]["markets"]]
    allowed = 0.05 * doc["predicted"]["finish_s"] + (0.0 if same_path else doc["measured"]["resume_s"])
    assert abs(doc["finish_s"] - doc["predicted"]["finish_s"]) <= allowed, (doc["finish_s"], path, doc["predicted"])
    # The bill against a witness it is not computed from: the lives the runner itself recorded (each
    # `instance` event to its `exit`, wall seconds x the time scale). An instance is held from the decision
    # to start it, before the runner's first line, to its release (a noticed spot instance: the reclaim).
    lived = _runner_lives(tmp_path / "run", doc["time_scale"])
    slack = {m: sum(1 for i in doc["instances"] if i["market"] == m) * (3.0 * doc["time_scale"] + doc["notice_s"])
             / 3600 for m in lived}
    # A reclaimed runner may write its exit a moment after the reclaim, where the bill ends, before the kill lands
    # (CI once: 3.5 ms of wall time, 2 s of trace): 0.1 s of wall time an instance
    late = {m: sum(1 for i in doc["instances"] if i["market"] == m) * 0.1 * doc["time_scale"] / 3600 for m in lived}
    billed = {m: e["hours"] for m, e in doc["bill"]["markets"].items()}
    assert set(billed) == set(lived) == {"spot", "on-demand"}
    assert all(lived[m] - late[m] <= billed[m] <= lived[m] + slack[m] for m in lived), (billed, lived, slack)


def _runner_lives(run_dir: Path, time_scale: float) -> dict[str, float]:
    """Trace hours per market that the runner's own telemetry says its instances lived: from each runner's
    process start (its `instance` event's process_start_t) to its `exit`, or to its last event (the notice,
    at the latest) where a reclaim killed it before it wrote one."""
    from costsim.contract.telemetry import read_events
    lived: dict[str, float] = {}
    start = last = None

    def close() -> None:
        if start is not None:
            began = min(start["t"], start.get("process_start_t") or start["t"])
            lived[start["market"]] = lived.get(start["market"], 0.0) + (last - began) * time_scale / 3600

    for e in read_events(run_dir):
        if e["event"] == "instance" and e.get("rank") is None:
            close()
            start = e
        last = e["t"]
        if e["event"] == "exit" and e.get("rank") is None:
            close()
            start = None
    close()
    return lived


@pytest.mark.slow
def test_a_killed_controller_picks_up_without_a_second_job_or_a_second_bill(run_cli, tmp_path):
    """SIGKILL the controller while its job trains; started again on the same folder it keeps the
    running job (no second runner), bills that instance once, and the job finishes."""
    plan = _plan(run_cli, tmp_path)
    run_dir = tmp_path / "run"
    # 15 h of spot from the start; 4,000 steps: the pick-up is what is tested, not the length
    first = _control(plan, run_dir, "--policy", "greedy", window=3, steps=4000)
    deadline = time.time() + 120
    while True:   # kill it once its first instance's job is training
        time.sleep(0.3)
        journal = json.loads((run_dir / "control.json").read_text()) if (run_dir / "control.json").exists() else {}
        if journal.get("instances") and journal["instances"][-1]["handle"].get("progressing"):
            break
        if time.time() > deadline:
            first.kill()
            raise AssertionError(f"the first job never started training in 120 s: {first.communicate()[1][-2000:]}")
    os.kill(first.pid, signal.SIGKILL)
    first.communicate()
    held = json.loads((run_dir / "control.json").read_text())["instances"][-1]
    assert held["end_s"] is None and os.path.exists(f"/proc/{held['handle']['pid']}")   # the job outlived it
    second = _control(plan, run_dir, window=3, steps=4000)
    out, err = second.communicate(timeout=400)
    assert second.returncode == 0, err[-3000:]
    assert "still held: keeping it" in err
    doc = json.loads(out)
    assert doc["status"] == "done"
    assert [i["start_s"] for i in doc["instances"]].count(held["start_s"]) == 1
    for a, b in zip(doc["instances"], doc["instances"][1:]):   # never two instances at once
        assert a["end_s"] <= b["start_s"] + 1e-3
    billed_h = sum(e["hours"] for e in doc["bill"]["markets"].values())
    held_h = sum(i["end_s"] - i["start_s"] for i in doc["instances"]) / 3600
    assert billed_h == pytest.approx(held_h) and doc["end_s"] >= held_h * 3600 - 1e-3
    events = [json.loads(line) for line in (run_dir / "telemetry.jsonl").read_text().splitlines()]
    # One runner per instance at most (a second copy would add one), and the job ended once.
    assert sum(1 for e in events if e["event"] == "instance") <= len(doc["instances"])
    assert sum(1 for e in events if e["event"] == "end") == 1


ENGINE = (os.geteuid() == 0 and (os.environ.get("CI") or os.environ.get("COSTSIM_ENGINE_TESTS") == "1")
          and os.environ.get("COSTSIM_ENGINE_TESTS") != "0")


@pytest.mark.skipif(not ENGINE, reason="starts a Slurm cluster on this machine: only in CI or with "
                    "COSTSIM_ENGINE_TESTS=1, as root")
@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_backend_learns_preemptions_from_slurm(run_cli, tmp_path):
    """On the one-host Slurm with spot/on-demand/reclaim partitions: reclaim jobs from a real window
    make Slurm preempt the spot job; the controller sees it in Slurm's job state, falls back to
    on-demand, and the job finishes. Window 8, 10,000 steps and 11 h hold in the simulator at step times
    from 4 to 6.7 ms and meet the deadline at 9 ms (`scripts/drill_config.py --rig slurm`): at 12,000
    steps and 9 h, a machine 1.36x slower than an idle one (CI's two workers) missed by 0.5 h."""
    script = ROOT / "scripts" / "slurm_control_cluster.sh"
    up = subprocess.run(["bash", str(script), "up"], capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stderr[-2000:]
    try:
        plan = _plan(run_cli, tmp_path)
        proc = subprocess.Popen([sys.executable, "-m", "costsim", "control", str(plan), "--backend", "slurm",
                                 "--policy", "greedy", "--reclaim-trace", str(WINDOWS / "8.json"), "--time-scale",
                                 "300", "--deadline", "11h", "--steps", "10000", "--run-dir", str(tmp_path / "run"),
                                 "--format", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=500)
    finally:
        subprocess.run(["bash", str(script), "down"], capture_output=True, timeout=120)
    doc = json.loads(out)
    assert doc["status"] == "done", err[-3000:]
    preempted = [i for i in doc["instances"] if i["ended"] == "preempted"]
    assert doc["deadline_met"], doc["instances"]
    assert preempted and all(i["market"] == "spot" and "noticed" in i["handle"] for i in preempted)
    assert {i["handle"].get("state") for i in preempted} <= {"PREEMPTED", "FAILED", "CANCELLED"}
    assert doc["instances"][-1]["market"] == "on-demand" and doc["instances"][-1]["ended"] == "finished"


@pytest.mark.skipif(not ENGINE, reason="starts a Slurm cluster on this machine: only in CI or with "
                    "COSTSIM_ENGINE_TESTS=1, as root")
@pytest.mark.slow
@pytest.mark.slurm
def test_a_two_node_plan_trains_on_both_nodes_of_a_real_slurm_and_is_billed_for_both(run_cli, tmp_path):
    """A 2-node plan under --backend slurm on a one-host Slurm of two slurmd (NODES=2: costsim-n1 and
    costsim-n2, scripts/slurm_control_cluster.sh): every instance is a 2-node job whose batch script starts
    one runner a node with srun (it used to `exec` one runner on the first node, which waited at the
    rendezvous for a second that never came); the job trains at world size 2 across both nodes, survives
    Slurm's preemption of its spot job (window 59: spot for 1.5 h, then a reclaim job takes a node), and the
    bill counts two nodes."""
    script = ROOT / "scripts" / "slurm_control_cluster.sh"
    up = subprocess.run(["bash", str(script), "up"], env={**os.environ, "NODES": "2"}, capture_output=True,
                        text=True, timeout=600)
    assert up.returncode == 0, up.stderr[-2000:]
    try:
        one = Plan.read(_plan(run_cli, tmp_path))
        from dataclasses import replace
        plan = replace(one, resources=replace(one.resources, nodes=2, gpus_per_node=1)).write(tmp_path / "two.json")
        proc = subprocess.Popen([sys.executable, "-m", "costsim", "control", str(plan), "--backend", "slurm",
                                 "--policy", "uniform-progress", "--reclaim-trace", str(WINDOWS / "59.json"),
                                 "--time-scale", "300", "--deadline", "14h", "--steps", "6000", "--run-dir",
                                 str(tmp_path / "run"), "--format", "json"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=500)
    finally:
        subprocess.run(["bash", str(script), "down"], capture_output=True, timeout=120)
    assert proc.returncode == 0, err[-3000:]
    doc = json.loads(out)
    assert doc["status"] == "done" and doc["deadline_met"], doc["instances"]
    assert [i["ended"] for i in doc["instances"] if i["market"] == "spot"][:1] == ["preempted"], doc["instances"]
    assert doc["instances"][-1]["market"] == "on-demand" and doc["instances"][-1]["ended"] == "finished"
    from costsim.contract.telemetry import read_events
    events = read_events(tmp_path / "run")
    # every life ran on both nodes: one supervisor a node, and workers at world size 2
    lives = [e for e in events if e["event"] == "instance"]
    assert sorted({e.get("node", 0) for e in lives}) == [0, 1] and len(lives) == 2 * sum(
        1 for i in doc["instances"] if i["ended"] != "withdrawn")
    assert {e["world_size"] for e in events if e["event"] == "step"} == {2}
    price = Plan.read(plan).resources.price_per_node_h
    for market, entry in doc["bill"]["markets"].items():   # two nodes by the hour (the billing minimum aside)
        assert entry["cost"] >= 2 * price[market] * entry["hours"] - 1e-9


def test_the_simulators_release_time_holds_the_instance_after_the_work():
    """JobParams.release_s (the job's exit, measured by the controller): the instance is held and
    billed that much longer after the last save; zero leaves the model as the planner uses it."""
    from costsim.sim.market import AlwaysAvailable
    prices = {"on-demand": MarketPrice(per_hour=3.6)}
    outcomes = {}
    for release_s in (0.0, 100.0):
        params = JobParams(work_s=1000.0, deadline_s=5000.0, checkpoint_interval_s=300.0, checkpoint_s=10.0,
                           changeover_s=50.0, release_s=release_s)
        outcomes[release_s] = run_trial(params, policies.get("on-demand"), AlwaysAvailable(), prices)
    assert outcomes[0.0].makespan_s == pytest.approx(50.0 + 1000.0 + 4 * 10.0)   # 3 periodic saves and the last
    assert outcomes[100.0].makespan_s == pytest.approx(outcomes[0.0].makespan_s + 100.0)
    assert outcomes[100.0].cost == pytest.approx(outcomes[0.0].cost + 3.6 * 100.0 / 3600.0)


def test_a_step_time_not_yet_measured_is_held_at_a_margin_by_where_the_plans_figure_came_from():
    """Before the job has made a steady step, the controller decides on the plan's step time plus a
    margin by its source (an estimate 3x, a derived figure 1.5x, a measurement 1.25x); once steps are
    measured, their spread sets the margin instead."""
    from costsim.control.controller import measured, unseen_step_factor
    assert [unseen_step_factor(s) for s in ("estimated", "derived (measured H200 / MLPerf 1.10)",
                                            "MEASURED on H200, 2026-11-30", "measured (2 run(s), calibrated)",
                                            None, "a guess")] == [3.0, 1.5, 1.25, 1.25, 3.0, 3.0]
    plan = PlanFigures(total_steps=1000, step_s=0.002, start_s=3.0, checkpoint_s=0.05, checkpoint_stall_s=None,
                       interval_s=2.0, restart_s=4.0, unseen_step=3.0)
    fresh = measured(Progress(), plan, 600.0, resumes=[1800.0, 2400.0])   # a restart seen: no restart margin
    work = 1000 * 0.002 * 600.0
    assert fresh.figures(1000, 1000, 600.0).margin_s == pytest.approx(2.0 * work)
    assert fresh.figures(1000, 250, 600.0).margin_s == pytest.approx(2.0 * work / 4)   # the steps left only
    assert fresh.figures(1000, 1000, 600.0, with_margin=False).margin_s == 0.0
    steady = Progress(step_times=[0.004] * 300, step_ends=[float(i) for i in range(300)])
    known = measured(steady, plan, 600.0, resumes=[1800.0, 2400.0])
    assert known.step_s == pytest.approx(0.004 * 600.0)
    assert known.figures(1000, 1000, 600.0).margin_s == pytest.approx(0.0)   # uniform steps: no spread


def test_without_deadline_a_drill_takes_the_plans_deadline_in_trace_time(run_cli, tmp_path):
    """The plan's deadline is wall time for its job, like its step times, which --time-scale turns into trace
    time: left out, the drill's deadline is the plan's x the scale, said in a line (it was the plan's 10
    minutes read as trace time: no drill could meet it)."""
    from costsim.control import session
    plan = _plan(run_cli, tmp_path)
    said = []
    request = session.Request(plan=str(plan), backend="local", run_dir=str(tmp_path / "run"), policy="greedy",
                              trace=str(WINDOWS / "6.json"), reclaim_trace=None, time_scale=600.0, notice_s=None,
                              deadline_s=None, poll_s=None, runner_args=[], steps=None, partitions=None)
    controller, journal, lock, _ = session.open_session(request, said.append)
    controller.backend.close()
    lock.release()
    assert journal.deadline_s == Plan.read(plan).policy.deadline_s * 600 == 100 * H
    assert said == ["costsim control: deadline 100.00 h of trace time: the plan's 10.0m x --time-scale 600 (--deadline sets "
                    "another)"]


# -- the controller's reading of a run folder, on literal telemetry ---------------------------------
def _write(run_dir: Path, *events: dict) -> None:
    with open(run_dir / "telemetry.jsonl", "a") as handle:
        for e in events:
            handle.write(json.dumps({"run": "r", "world_size": 2, **e}) + "\n")


def _life(t0: float, first_step: int, steps: int, *, start_s: float, warm_s: float, step_s: float) -> list[dict]:
    """One runner life: launch at t0, its start event, WARMUP_STEPS steps of warm_s each, then steady ones."""
    from costsim.contract.timing import WARMUP_STEPS
    out = [{"t": t0, "rank": None, "event": "launch"}, {"t": t0 + start_s, "rank": 0, "event": "start", "step": first_step}]
    t = t0 + start_s
    for n in range(1, steps + 1):
        t += warm_s if n <= WARMUP_STEPS else step_s
        out.append({"t": t, "rank": 0, "event": "step", "step": first_step + n,
                    "step_time_s": warm_s if n <= WARMUP_STEPS else step_s, "samples": 64})
    return out


def test_the_controller_reads_its_figures_off_the_telemetry(tmp_path):
    """Step time, what a start and a restart cost, a save, from literal telemetry: two lives of a job (a
    first start at trace 0, a restart at trace 100), each a launch, a 2 s start, 5 warm-up steps of 1 s, then
    steps of 0.5 s; an interval save of 3 s; time scale 1 (trace = epoch here)."""
    from costsim.control.progress import RunFolder
    _write(tmp_path, *_life(0.0, 0, 25, start_s=2.0, warm_s=1.0, step_s=0.5))
    _write(tmp_path, {"t": 18.0, "rank": 0, "event": "checkpoint_save", "step": 25, "duration_s": 3.0,
                      "reason": "interval", "mode": "sync"})
    _write(tmp_path, *_life(100.0, 25, 25, start_s=2.0, warm_s=1.0, step_s=0.5))
    journal = Journal(plan_file="-", policy="greedy", backend="local", offering="x", deadline_s=1000.0, time_scale=1.0,
                      notice_s=0.0, t0=0.0)
    journal.instances = [Instance(offering="x", market="spot", start_s=0.0, end_s=50.0, ended="preempted",
                                  handle={"progressing": True}),
                         Instance(offering="x", market="on-demand", start_s=100.0, handle={"progressing": True})]
    plan = PlanFigures(total_steps=100, step_s=9.0, start_s=9.0, checkpoint_s=9.0, checkpoint_stall_s=None,
                       interval_s=60.0, restart_s=9.0)
    controller = Controller(journal, LocalBackend(None, None, notice_s=0.0), RunFolder(tmp_path), VirtualClock(),
                            policies.get("greedy"), plan, run_dir=tmp_path, poll_s=1.0, horizon_s=4000.0,
                            say=lambda line: None)
    progress = controller.folder.observe()
    m = controller.measured(progress, t=120.0)
    # steady steps: 20 a life (step 26, which pays the save of step 25, is a warm-up step of the second life)
    assert m.step_s == 0.5 and m.step_seen and len(progress.step_times) == 40
    assert m.checkpoint_s == 3.0
    # a start: from the instance's start to the end of its 5 warm-up steps (2 + 5 x 1 s), less 5 steady steps
    assert m.start_s == pytest.approx(7.0 - 2.5) and m.resume_s == pytest.approx(4.5) and m.restart_seen
    f = m.figures(100, 50, 0.0, with_margin=False)
    assert (f.work_total_s, f.changeover_s, f.restart_s) == (50.0, pytest.approx(4.5), pytest.approx(0.0))


def test_the_controller_charges_an_async_save_the_steps_beside_its_write_as_calibrate_does(tmp_path):
    """Steps of 1 s; an async save of step 10: step 11 pays its 0.5 s stall, steps 12-14 run beside its
    3.3 s write at 1.2 s each; its event comes after step 14. The controller reads it as it arrives: the
    steady step stays 1 s (it used to take in the slower steps), and the save costs training 0.5 + 3 x 0.2 s:
    the figures `costsim calibrate` reads off the same events (costsim.contract.steps)."""
    from costsim.contract.steps import async_save_costs, steady_step_times
    from costsim.contract.telemetry import read_events
    from costsim.control.progress import RunFolder
    events = [{"t": 0.0, "rank": None, "event": "launch"}, {"t": 1.0, "rank": 0, "event": "start", "step": 0}]
    t, times = 1.0, {11: 1.5, 12: 1.2, 13: 1.2, 14: 1.2}
    for step in range(1, 21):
        t += times.get(step, 1.0)
        events.append({"t": t, "rank": 0, "event": "step", "step": step, "step_time_s": times.get(step, 1.0)})
        if step == 14:   # the stall began when step 10 ended (t=11), the write ended now (t=16.1)
            events.append({"t": t, "rank": 0, "event": "checkpoint_save", "step": 10, "duration_s": t - 11.0,
                           "stall_s": 0.5, "mode": "async", "reason": "interval"})
    folder = RunFolder(tmp_path)
    _write(tmp_path, *events[:14])
    folder.observe()   # the steps beside the write arrive before the save's event
    _write(tmp_path, *events[14:])
    progress = folder.observe()
    assert progress.step_times == [1.0] * 11 and progress._steps == [6, 7, 8, 9, 10, 15, 16, 17, 18, 19, 20]
    assert progress.stall_s == [pytest.approx(0.5 + 3 * 0.2)]
    recorded = read_events(tmp_path)
    assert progress.step_times == steady_step_times(recorded)
    assert progress.stall_s == [pytest.approx(c) for c in async_save_costs(recorded, 1.0)]


def test_an_instance_is_progressing_from_its_first_trained_step_not_its_start(tmp_path):
    """The runner's `start` event comes before its first (compiling) step: the simulator's start-up ends at
    that step, and so does the controller's (it used to count the job as training from `start`)."""
    from costsim.control.progress import RunFolder
    journal = Journal(plan_file="-", policy="greedy", backend="local", offering="x", deadline_s=1000.0, time_scale=1.0,
                      notice_s=0.0, t0=0.0)
    instance = Instance(offering="x", market="spot", start_s=10.0)
    journal.instances = [instance]
    plan = PlanFigures(total_steps=100, step_s=1.0, start_s=5.0, checkpoint_s=1.0, checkpoint_stall_s=None,
                       interval_s=60.0)
    controller = Controller(journal, LocalBackend(None, None, notice_s=0.0), RunFolder(tmp_path), VirtualClock(),
                            policies.get("greedy"), plan, run_dir=tmp_path, poll_s=1.0, horizon_s=4000.0,
                            say=lambda line: None)
    _write(tmp_path, {"t": 11.0, "rank": None, "event": "launch"}, {"t": 12.0, "rank": 0, "event": "start", "step": 40})
    progress = controller.folder.observe()
    assert not controller._progressing(instance, progress)
    assert controller.live_step(30.0, progress, instance) == 40.0   # no steps counted that have not happened
    _write(tmp_path, {"t": 20.0, "rank": 0, "event": "step", "step": 41, "step_time_s": 8.0, "samples": 64})
    assert controller._progressing(instance, controller.folder.observe())


class FinishesWhenPolled:
    """A runner that writes its `end` and `exit` and exits 0 exactly when the backend looks at it: what a job
    does that finishes between two of the controller's looks."""

    log = Path("finishing.log")

    def __init__(self, run_dir: Path, clock: VirtualClock):
        self.run_dir, self.clock = run_dir, clock

    def exit_code(self, handle: dict) -> tuple[bool, int | None]:
        t = self.clock.now()
        _write(self.run_dir, {"t": t, "rank": 0, "event": "end", "step": 100, "samples": 6400},
               {"t": t, "rank": None, "event": "exit", "status": "done"})
        return True, 0

    def alive(self, handle: dict) -> bool:
        return False

    def notify(self, handle: dict) -> None:
        pass

    def kill(self, handle: dict) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_job_that_finishes_between_two_looks_is_finished_not_failed(tmp_path):
    """The controller looks at the job before its telemetry: a job seen to have ended has written all it will
    (it read the telemetry first, then found the job gone with no `end` in what it had read: 'failed')."""
    from costsim.control.progress import RunFolder
    clock = VirtualClock()
    clock.t = 50.0
    _write(tmp_path, *_life(0.0, 0, 10, start_s=1.0, warm_s=1.0, step_s=1.0))
    journal = Journal(plan_file="-", policy="on-demand", backend="local", offering="x", deadline_s=1000.0,
                      time_scale=1.0, notice_s=0.0, t0=0.0)
    journal.instances = [Instance(offering="x", market="on-demand", start_s=0.0, handle={"pid": 1, "progressing": True})]
    plan = PlanFigures(total_steps=100, step_s=1.0, start_s=1.0, checkpoint_s=1.0, checkpoint_stall_s=None,
                       interval_s=60.0)
    controller = Controller(journal, LocalBackend(None, FinishesWhenPolled(tmp_path, clock), notice_s=0.0),
                            RunFolder(tmp_path), clock, policies.get("on-demand"), plan, run_dir=tmp_path, poll_s=1.0,
                            horizon_s=4000.0, say=lambda line: None)
    done = controller.run()
    assert done.status == "done" and done.instances[0].ended == "finished"


@pytest.mark.parametrize("status, done, stopping, ended", [
    (Status(ended=True, exit_code=0), False, False, "finished"),        # exit 0: the runner finished
    (Status(ended=True, exit_code=None), True, False, "finished"),      # its `end` event, exit unknown (adopted)
    (Status(ended=True, withdrawn=True), False, False, "withdrawn"),
    (Status(ended=True, exit_code=75, preempted=True), False, False, "preempted"),
    (Status(ended=True, exit_code=75), False, True, "stopped"),         # it left because we asked (a move)
    (Status(ended=True, exit_code=75), False, False, "preempted"),      # a notice we did not give
    (Status(ended=True, exit_code=1), False, False, "failed"),
])
def test_how_an_instance_ended_is_one_table(status, done, stopping, ended):
    from costsim.control.controller import ended_as
    assert ended_as(status, done=done, stopping=stopping) == ended


def _live_members(group: int) -> list[int]:
    """Processes of a process group that still run (a killed one may linger as a zombie until reaped)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        if int(fields[2]) == group and fields[0] not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


def test_the_local_backend_kills_its_jobs_group_and_never_a_number_that_is_no_longer_its():
    """A job that exits leaving a worker behind: its group is killed before its leader is reaped (while the
    number is still the job's). A handle whose process is gone (or whose number another program now has,
    seen by its start time) is never killed: the backend used to killpg whatever had the number."""
    from costsim.control.local import Processes, process_start_ticks
    jobs = Processes(plan=Path("-"), run_dir=Path("-"), run_id="r", runner_args=[])
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & exit 0"], start_new_session=True)
    jobs._children[leader.pid] = leader
    handle = {"pid": leader.pid, "proc_start": process_start_ticks(leader.pid)}
    deadline = time.monotonic() + 30
    while not jobs.exit_code(handle)[0]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    while _live_members(leader.pid) and time.monotonic() < deadline:   # the worker it left goes with it
        time.sleep(0.05)
    assert _live_members(leader.pid) == []
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)   # "another program" with its own group
    try:
        jobs.kill({"pid": other.pid, "proc_start": (process_start_ticks(other.pid) or 0) + 1})   # not the job's
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_withdrawn_request_is_no_restart_no_stint_and_no_bill(tmp_path):
    """On Slurm a spot request withdrawn before it ran (the capacity went between the look and the request)
    is in the journal, but the job never started there: it is not a restart, it bills nothing (not even the
    billing minimum), and the replays' stints are the instances that ran (each with its own start-up: the
    withdrawn one used to shift every later stint's by one)."""
    from costsim.control.controller import stint_dynamics
    from costsim.control.progress import RunFolder
    from costsim.control.report import Prices, summary
    _write(tmp_path, *_life(0.0, 0, 25, start_s=2.0, warm_s=1.0, step_s=0.5))
    _write(tmp_path, *_life(100.0, 25, 25, start_s=6.0, warm_s=1.0, step_s=0.5))   # a slower second start
    journal = Journal(plan_file="-", policy="greedy", backend="slurm", offering="x", deadline_s=1000.0,
                      time_scale=1.0, notice_s=0.0, t0=0.0, status="done", end_s=200.0)
    journal.instances = [
        Instance(offering="x", market="spot", start_s=0.0, end_s=50.0, ended="preempted", handle={"progressing": True}),
        Instance(offering="x", market="spot", start_s=60.0, end_s=60.0, ended="withdrawn"),
        Instance(offering="x", market="on-demand", start_s=100.0, end_s=150.0, ended="finished",
                 handle={"progressing": True})]
    plan = PlanFigures(total_steps=50, step_s=0.5, start_s=2.0, checkpoint_s=1.0, checkpoint_stall_s=None,
                       interval_s=60.0)
    controller = Controller(journal, LocalBackend(None, None, notice_s=0.0), RunFolder(tmp_path), VirtualClock(),
                            policies.get("greedy"), plan, run_dir=tmp_path, poll_s=1.0, horizon_s=4000.0,
                            say=lambda line: None)
    progress = controller.folder.observe()
    stints = stint_dynamics(journal, progress, controller.clock, controller.measured(progress))
    assert [round(start, 6) for start, _ in stints] == [4.5, 8.5]   # 2 + 5 - 2.5, then 6 + 5 - 2.5
    report = summary(journal, Prices(per_node_h={"spot": 1.0, "on-demand": 3.0}, nodes=1, minimum_s=60.0), None)
    assert report["restarts"] == 1 and report["bill"]["markets"]["spot"]["instances"] == 1
    spot = report["bill"]["markets"]["spot"]
    assert (spot["hours"], spot["cost"]) == (pytest.approx(50.0 / 3600), pytest.approx(60.0 / 3600))   # its minimum
