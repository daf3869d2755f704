"""Real DDP runs on CPU (gloo, 2 processes): exact resume, notice handling, damaged checkpoints."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runner_helpers import clean_and_killed, events, execute, summary, tiny_plan

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow   # real DDP runs (see pyproject's markers)
STEPS, INTERVAL = "400", 50


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return tiny_plan(tmp_path_factory.mktemp("plan"), interval_steps=INTERVAL)


@pytest.fixture(scope="module")
def clean(plan, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("clean")
    result = execute(plan, run_dir, "--steps", STEPS, "--seed", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    return summary(run_dir)


def test_clean_run_writes_summary_and_telemetry(clean):
    assert clean["status"] == "done" and clean["steps"] == int(STEPS) and clean["restarts"] == 0
    assert clean["samples"] == int(STEPS) * 64
    assert len(clean["final_state_sha256"]) == 64


def test_three_sigkills_resume_to_the_same_final_state(plan, clean, tmp_path):
    result = execute(plan, tmp_path, "--steps", STEPS, "--seed", "3", "--inject-preemptions", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    s = summary(tmp_path)
    assert s["restarts"] == 3
    assert s["final_state_sha256"] == clean["final_state_sha256"]
    kills = [e["step"] for e in events(tmp_path, "preempted")]
    resumed = [e["step"] for e in events(tmp_path, "start")][1:]
    assert len(kills) == 3 and len(resumed) == 3
    for killed_at, resumed_from in zip(kills, resumed):
        assert 0 <= killed_at - resumed_from <= INTERVAL   # at most one checkpoint interval lost
    assert s["lost_steps"] == sum(k - r for k, r in zip(kills, resumed))
    # Each resume built the model without initial values (the load fills it) and still ends bit-exact.
    assert [e["build"] for e in events(tmp_path, "runtime")] == ["initialised"] + ["empty"] * 3
    loads = events(tmp_path, "checkpoint_load")   # each with the making of the state it loaded into, timed
    assert len(loads) == 3 and all(0 < e["sized_s"] < e["t"] - worker_start for e, worker_start in
                                   zip(loads, [w["process_start_t"] for w in events(tmp_path, "runtime")][1:]))
    assert all(0 < e["sized_optimizer_s"] <= e["sized_s"] for e in loads)   # the optimizer's part, made directly
    assert "runner: restart 3: preempted" in result.stderr
    # A drill as intended reads as one line per fault, not the peers' tracebacks.
    assert [line.split(" (")[0] for line in result.stderr.splitlines() if "drill: injected" in line] == \
        [f"runner: drill: injected kill at step {k}" for k in kills]
    assert "Traceback" not in result.stderr and "Connection reset" not in result.stderr
    # `runner execute`'s own start, before its checks, what scripts/bench_restart.py measures a life from
    instance = events(tmp_path, "instance", rank=None)[0]
    worker = events(tmp_path, "runtime")[0]
    assert instance["process_start_t"] <= instance["t"] < worker["process_start_t"]
    # ... and each of the supervisor's restarts inside that life, from its decision to the first step after it
    bench = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_restart.py"), str(tmp_path)],
                           capture_output=True, text=True, check=True)
    rows = [line for line in bench.stdout.splitlines() if "decision to the first step" in line]
    assert [line.split(",")[0].split()[-1] for line in rows] == ["1", "2", "3"]
    assert "fresh: execute to the first step" in bench.stdout   # the first start is not taken for a resume


def test_sigterm_notice_checkpoints_and_loses_no_step(plan, clean, tmp_path):
    result = execute(plan, tmp_path, "--steps", STEPS, "--seed", "3", "--inject-preemptions", "term@130")
    assert result.returncode == 0, result.stderr[-3000:]
    notice = [e for e in events(tmp_path, "preempted") if e["kind"] == "notice"]
    assert len(notice) == 1
    emergency_step = notice[0]["emergency_checkpoint"]
    saves = [e for e in events(tmp_path, "checkpoint_save") if e["reason"] == "notice"]
    assert [e["step"] for e in saves] == [emergency_step]
    assert events(tmp_path, "checkpoint_load")[0]["step"] == emergency_step   # resumed exactly there
    s = summary(tmp_path)
    assert s["restarts"] == 1 and s["lost_steps"] == 0
    assert s["final_state_sha256"] == clean["final_state_sha256"]
    assert "death signal" not in result.stderr   # the workers got the notice, not torchrun (30 s to SIGKILL)


def test_a_notice_to_the_runner_is_passed_to_the_workers_who_checkpoint_and_stop(plan, tmp_path):
    import signal
    import subprocess
    import sys
    import time
    proc = subprocess.Popen([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(tmp_path),
                             "--seed", "3"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not any(e["step"] >= 60 for e in events(tmp_path, "step")) and time.monotonic() < deadline:
        time.sleep(0.05)
    sent = time.time()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-3000:]             # faults.PREEMPTED_EXIT: stopped by the notice
    (ended,) = events(tmp_path, "exit", rank=None)
    assert sent <= ended["notice_t"] <= ended["t"]         # when the notice came: notice to exit from telemetry
    assert "death signal" not in err                       # torchrun was not the one that stopped them
    notice = [e for e in events(tmp_path, "preempted") if e.get("kind") == "notice"]
    assert len(notice) == 1
    saved = [e["step"] for e in events(tmp_path, "checkpoint_save") if e["reason"] == "notice"]
    assert saved == [notice[0]["emergency_checkpoint"]] and saved[0] >= 60
    assert f"runner: notice at step {saved[0]}: save: checkpoint.notice_save is always" in err   # said once
    s = summary(tmp_path)
    assert s["status"] == "preempted" and s["restarts"] == 0 and s["steps"] == saved[0]


def test_a_notice_is_on_record_before_the_reclaim_even_when_the_workers_are_still_starting(plan, tmp_path):
    """A notice in the runner's start-up, then the reclaim's SIGKILL before the runner could write `exit`
    (CI's loaded machine did this to the control drill: the life's record then ended at its launch, an hour
    of trace before the reclaim). The supervisor writes the notice down as it comes."""
    import os
    import signal
    import subprocess
    import sys
    import time
    proc = subprocess.Popen([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(tmp_path),
                             "--seed", "3"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not events(tmp_path, "launch", rank=None):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
        sent = time.time()
        proc.send_signal(signal.SIGTERM)
        while not events(tmp_path, "notice", rank=None) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # the reclaim: the node and everything on it
        except ProcessLookupError:   # the runner was quicker: it had left, with every process of its group
            pass
        proc.wait(timeout=30)
    notices, exits = events(tmp_path, "notice", rank=None), events(tmp_path, "exit", rank=None)
    if notices:
        (notice,) = notices
        assert sent <= notice["t"]
        # where the runner was quicker than this test: the same moment
        assert all(e["notice_t"] <= notice["t"] for e in exits), (exits, notice)
        assert notice["ended"] == "cancelled"   # owned hardware: a SIGTERM there is someone cancelling the life
    else:   # the runner had left before its notice writer ran: the notice is in its `exit` (Supervisor._finish)
        (exit_,) = exits
        assert sent <= exit_["notice_t"]
    # the tiny plan is on owned hardware: a SIGTERM there is someone cancelling the life (on spot: a reclaim)
    from costsim.contract.lives import lives
    from costsim.contract.telemetry import read_events
    assert [x.ended for x in lives(read_events(tmp_path)).lives] == ["cancelled"]


def test_a_notice_between_two_attempts_ends_the_run_as_preempted(plan, tmp_path):
    """The notice comes while the supervisor restarts after a kill: no attempt runs on after it (it used
    to start the next attempt, whose workers never heard of the notice)."""
    import signal
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(tmp_path),
                             "--seed", "3", "--inject-preemptions", "kill@40"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:   # the moment the supervisor decides to restart
        lines.append(line)
        if line.startswith("runner: restart 1"):
            proc.send_signal(signal.SIGTERM)
            break
    lines += proc.stderr.readlines()
    proc.wait(timeout=120)
    assert proc.returncode == 75, "".join(lines)[-3000:]
    s = summary(tmp_path)
    assert s["status"] == "preempted" and s["steps"] < 400
    assert not any(e["event"] == "end" for e in events(tmp_path, "end", rank=None))


def test_corrupt_newest_checkpoint_is_skipped_and_the_previous_used(plan, tmp_path):
    assert execute(plan, tmp_path, "--steps", "150", "--seed", "3").returncode == 0
    newest = tmp_path / "checkpoints" / "step-150"
    shard = next(p for p in newest.iterdir() if p.suffix == ".distcp")
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])           # truncated
    partial = tmp_path / "checkpoints" / ".step-175.tmp"
    shutil.copytree(tmp_path / "checkpoints" / "step-100", partial)              # a save cut short
    (partial / "manifest.json").unlink()
    (tmp_path / ".resume-check-0123456789ab.json").write_text("{}")   # left by a runner killed outright
    result = execute(plan, tmp_path, "--steps", "200", "--seed", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "skipping checkpoint step-150" in result.stderr
    assert "removing partial checkpoint .step-175.tmp" in result.stderr
    skipped = {e["step"]: e["reason"] for e in events(tmp_path, "checkpoint_skipped")}
    assert "has" in skipped[150] or "CRC" in skipped[150]
    assert events(tmp_path, "checkpoint_load")[-1]["step"] == 100
    assert summary(tmp_path)["steps"] == 200
    # the supervisor checked both beside torchrun's start (runner.resume_check); rank 0 read neither again
    check = events(tmp_path, "resume_check", rank=None)[-1]
    assert (check["checked"], check["step"]) == ([150, 100], 100)
    assert events(tmp_path, "runtime")[-1]["checked_by"] == ["supervisor", "supervisor"]
    assert not list(tmp_path.glob(".resume-check-*"))


def test_when_every_checkpoint_is_damaged_the_run_starts_over_from_the_same_initial_weights(plan, tmp_path):
    """A checkpoint on the disk makes the workers build the model empty for it; when none of them
    loads, the model is built again with its initial values: the run is the fresh run it replaces."""
    fresh, run = tmp_path / "fresh", tmp_path / "run"
    for folder, steps in ((fresh, "100"), (run, "60")):
        result = execute(plan, folder, "--steps", steps, "--seed", "3")
        assert result.returncode == 0, result.stderr[-3000:]
    for folder in (run / "checkpoints").glob("step-*"):
        shard = next(p for p in folder.iterdir() if p.suffix == ".distcp")
        shard.write_bytes(bytes(b ^ 0xFF for b in shard.read_bytes()))   # same size, damaged
    again = execute(plan, run, "--steps", "100", "--seed", "3")   # would go on from step 60
    assert again.returncode == 0, again.stderr[-3000:]
    assert "skipping checkpoint step-60" in again.stderr and not events(run, "checkpoint_load")
    assert events(run, "runtime")[-1]["build"] == "empty, then initialised (no checkpoint to load)"
    assert summary(run)["final_state_sha256"] == summary(fresh)["final_state_sha256"]


def test_async_checkpoints_resume_exactly_too(tmp_path, monkeypatch):
    plan = tiny_plan(tmp_path / "p", interval_steps=INTERVAL, async_mode=True)
    monkeypatch.setenv("COSTSIM_CRC_WHILE_WRITING", "0")   # every manifest's CRCs read back after the write
    clean = execute(plan, tmp_path / "a", "--steps", "200", "--seed", "4")
    monkeypatch.setenv("COSTSIM_CRC_WHILE_WRITING", "1")   # the drill's manifests: CRCs computed while writing
    drill = execute(plan, tmp_path / "b", "--steps", "200", "--seed", "4", "--inject-preemptions", "kill@120")
    monkeypatch.delenv("COSTSIM_CRC_WHILE_WRITING")
    assert clean.returncode == 0 and drill.returncode == 0, drill.stderr[-3000:]
    assert summary(tmp_path / "a")["final_state_sha256"] == summary(tmp_path / "b")["final_state_sha256"]
    saves = events(tmp_path / "a", "checkpoint_save")
    assert {e["mode"] for e in saves if e["reason"] == "interval"} == {"async"}
    # The clean run's commits read each checkpoint back; the drill's ranks computed their files' CRCs while
    # writing them and rank 0 read back only DCP's small metadata file (written under another name, then
    # renamed). Either way every kept checkpoint passes the check a resume makes.
    from runner.checkpoint_manifest import verify
    assert saves and all(e["commit_read_bytes"] > 0.9 * e["bytes"] for e in saves)
    kept = {int(m.parent.name.split("-")[1]): m.parent for m in (tmp_path / "b").rglob("step-*/manifest.json")}
    assert kept and all(verify(folder) is None for folder in kept.values())
    followed = events(tmp_path / "b", "checkpoint_save")
    assert all(e["commit_read_bytes"] == (kept[e["step"]] / ".metadata").stat().st_size
               for e in followed if e["step"] in kept)
    assert followed and all(0 < e["commit_read_bytes"] < 0.02 * e["bytes"] for e in followed)
    # the default (=blocking): only the saves training waits for (here the final one) follow the writers; the
    # async ones beside training read back after
    mixed = execute(plan, tmp_path / "c", "--steps", "120", "--seed", "4")
    assert mixed.returncode == 0, mixed.stderr[-3000:]
    reads = {(e["mode"], e["commit_read_bytes"] < 0.02 * e["bytes"]) for e in events(tmp_path / "c", "checkpoint_save")}
    assert reads == {("async", False), ("sync", True)}
    assert all(verify(m.parent) is None for m in (tmp_path / "c").rglob("step-*/manifest.json"))
    # Each rank read its own share of the large tensors (weights and both AdamW moments of the two
    # larger layers), and the other's came by broadcast: together all of them, once.
    from runner.workloads.tiny import HIDDEN, INPUT
    shares = [e["owned_bytes"] for e in events(tmp_path / "b", "checkpoint_load", rank=None)]
    assert len(shares) == 2 and min(shares) > 0
    assert sum(shares) == 3 * 4 * (INPUT * HIDDEN + HIDDEN * HIDDEN)
    # The checkpoint the two ranks wrote in shares is whole: one process resumes from it.
    alone = execute(plan, tmp_path / "b", "--steps", "230", "--seed", "4", "--nproc-per-node", "1")
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert [e["step"] for e in events(tmp_path / "b", "start")][-1] == 200
    assert events(tmp_path / "b", "checkpoint_load")[-1]["owned_bytes"] == sum(shares)


def test_a_single_process_run_without_ddp_resumes_exactly(plan, tmp_path):
    # One process trains the bare model (no DDP wrapper); its checkpoints and resume are the same.
    _, drill = clean_and_killed(plan, tmp_path, "--steps", "120", "--seed", "5", "--nproc-per-node", "1", kill="kill@70")
    assert [e["world_size"] for e in events(drill, "start")] == [1, 1]


def test_the_first_step_of_each_start_can_be_profiled(plan, tmp_path, monkeypatch):
    # COSTSIM_PROFILE_FIRST_STEP: rank 0's first step of each life and the steady step after it under cProfile,
    # appended to one file and dumped beside it for scripts/profile_diff.py
    import subprocess
    import sys
    profile = tmp_path / "first-step.txt"
    monkeypatch.setenv("COSTSIM_PROFILE_FIRST_STEP", str(profile))
    result = execute(plan, tmp_path / "run", "--steps", "60", "--nproc-per-node", "1", "--inject-preemptions", "kill@55")
    assert result.returncode == 0, result.stderr[-3000:]
    text = profile.read_text()
    headings = [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("== run ")]
    assert [h.split(" (")[0] for h in headings] == [
        "the first step after step 0", "the steady step after step 1",   # the fresh start's,
        "the first step after step 50", "the steady step after step 51"]   # then the resume's
    assert text.count("train_step") >= 4 and "cumulative" in text
    dumps = [h.split(" (")[1].rstrip(")") for h in headings]
    assert sorted(dumps) == sorted(str(p) for p in tmp_path.glob("first-step.txt.*.prof")) and len(set(dumps)) == 4
    diff = subprocess.run([sys.executable, "scripts/profile_diff.py", dumps[2], dumps[3], "--top", "5"],
                          capture_output=True, text=True, timeout=60)
    assert diff.returncode == 0, diff.stderr
    rows = [line.split() for line in diff.stdout.splitlines() if line.split() and line.split()[0][0] in "+-"]
    assert len(rows) == 10   # --top 5, by own time and by cumulative time
    for table in (rows[:5], rows[5:]):   # each row: first - steady, first, steady; the most added first
        extras = [float(row[0]) for row in table]
        assert extras == sorted(extras, reverse=True)
        assert all(abs(float(row[0]) - (float(row[1]) - float(row[2]))) <= 0.0015 for row in table)


def test_a_torn_telemetry_line_between_lives_stops_nothing(plan, clean, tmp_path):
    """A life killed mid-line leaves a torn line; the next life appends after it. The job goes on to the
    same final state (its supervisor used to stop on the line), and `runner report` and `costsim
    calibrate` say they passed one damaged line over."""
    import subprocess
    import sys
    run = tmp_path / "run"
    first = execute(plan, run, "--steps", "200", "--seed", "3")
    assert first.returncode == 0, first.stderr[-3000:]
    with open(run / "telemetry.jsonl", "a") as handle:
        handle.write('{"t": 1.0, "run": "x", "rank": 0, "event": "st')   # a writer killed mid-line
    second = execute(plan, run, "--steps", STEPS, "--seed", "3")
    assert second.returncode == 0, second.stderr[-3000:]
    assert summary(run)["final_state_sha256"] == clean["final_state_sha256"]
    report = subprocess.run([sys.executable, "-m", "runner", "report", str(run)], capture_output=True, text=True,
                            timeout=60)
    assert report.returncode == 0 and "1 damaged line(s) passed over" in report.stdout, report.stdout
    calibrated = subprocess.run([sys.executable, "-m", "costsim", "calibrate", str(run), "--out",
                                 str(tmp_path / "cal.yaml")], capture_output=True, text=True, timeout=120)
    assert calibrated.returncode == 0, calibrated.stderr[-2000:]
    assert "telemetry has 1 damaged line(s), passed over" in calibrated.stderr + calibrated.stdout


def test_a_job_is_all_its_lives_a_notice_a_kill_and_the_resume_that_finishes_it(plan, tmp_path):
    """The same command three times on one run folder, as a spot job lives: a notice (SIGTERM: exit 75), a
    SIGKILL (a node that vanished: no exit record), then the life that finishes. summary.json, `runner
    report` and `costsim calibrate` count all three lives: 2 restarts (they said 0: only in-process
    relaunches were counted), the steps the killed life's successor trained again, and a restart cost
    measured from the real resumes (calibrate said 'restart: not measured')."""
    import json
    import signal
    import subprocess
    import sys
    import time
    run = tmp_path / "run"

    def life(until_step: int, sig: int) -> int:
        began = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "runner", "execute", str(plan), "--run-dir", str(run), *paced],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while not any(e["step"] >= until_step and e["t"] > began for e in events(run, "step")):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        (proc.send_signal if sig == signal.SIGTERM else lambda s: os.killpg(proc.pid, s))(sig)
        return proc.wait(timeout=120)

    import os
    paced = ["--steps", "3000", "--seed", "3", "--option", "pace=3ms"]   # 9 s: time to catch each life mid-way
    assert life(600, signal.SIGTERM) == 75
    assert life(1500, signal.SIGKILL) == -signal.SIGKILL
    # a vanished node takes its workers with it: none trains on beside the next life (torchrun starts each
    # worker in a session of its own, which a SIGKILL to the runner's group used to leave running)
    deadline = time.monotonic() + 10
    while _workers_of(run) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _workers_of(run) == []
    last = execute(plan, run, *paced)
    assert last.returncode == 0, last.stderr[-3000:]
    s = summary(run)
    assert s["status"] == "done" and s["steps"] == 3000
    assert s["job"]["lives"] == 3 and s["restarts"] == 2
    # the tiny plan is on owned hardware: a SIGTERM there is someone cancelling it (on spot: preempted-notice)
    assert [life["ended"] for life in s["lives"]] == ["cancelled", "vanished", "finished"]
    starts = [(e["t"], e["step"]) for e in events(run, "start")]
    assert [life["resumed_from"] > 0 for life in s["lives"]] == [False, True, True], (s["lives"], starts)
    assert s["lives"][1]["resumed_from"] == s["lives"][0]["reached"]   # the notice's checkpoint: nothing lost
    report = subprocess.run([sys.executable, "-m", "runner", "report", str(run)], capture_output=True, text=True,
                            timeout=60)
    assert "2 restarts" in report.stdout and "3 lives" in report.stdout and "life 3" in report.stdout, report.stdout
    calibrated = subprocess.run([sys.executable, "-m", "costsim", "calibrate", str(run), "--out",
                                 str(tmp_path / "cal.yaml"), "--format", "json"], capture_output=True, text=True,
                                timeout=120)
    assert calibrated.returncode == 0, calibrated.stderr[-2000:]
    (row,) = json.loads(calibrated.stdout)["runs"]
    assert row["restart_s"]["measured"] is not None and row["restart_s"]["measured"] > 0


def _workers_of(run_dir) -> list[int]:
    """Live worker processes (`runner.worker`) of this run folder."""
    from pathlib import Path
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"runner.worker" in words and str(run_dir).encode() in words and state not in ("Z", "X"):
            found.append(int(cmdline.parent.name))
    return found


def test_a_notice_between_micro_batches_abandons_the_step_and_resumes_exactly(tmp_path):
    """Steps longer than the ranks' agreement period (a 1.2 s pace over 4 micro-batches): the notice is agreed
    between micro-batches, the step in progress is dropped as if it had not begun, and its save starts
    within a micro-batch; the resumed run ends in the state of a run never interrupted."""
    from dataclasses import replace

    from costsim.contract.plan import Plan
    path = tiny_plan(tmp_path, interval_steps=None)
    plan = Plan.read(path)
    replace(plan, prediction=replace(plan.prediction, per_gpu_batch=8),   # 64 = 2 ranks x 8 x 4
            checkpoint=replace(plan.checkpoint, interval_s=3600.0)).write(path)
    args = ("--steps", "7", "--seed", "4", "--option", "pace=1.2s")
    clean, noticed = tmp_path / "clean", tmp_path / "noticed"
    result = execute(path, clean, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    result = execute(path, noticed, *args, "--inject-preemptions", "term@4")
    assert result.returncode == 0, result.stderr[-3000:]
    (notice,) = [e for e in events(noticed, "preempted") if e["kind"] == "notice"]
    # fired as the fifth step began: the notice reached both ranks within a micro-batch (0.3 s), long before
    # the last, and the save holds the four steps done
    assert notice["step"] == notice["emergency_checkpoint"] == 4
    assert 1 <= notice["abandoned_micro_batches"] <= 3
    # training stopped before step 5 could end: its 4 micro-batches take at least 1.2 s (0.3 s each)
    step4 = next(e for e in events(noticed, "step") if e["step"] == 4)
    assert 0 < notice["stopped_t"] - step4["t"] < 1.15
    assert events(noticed, "checkpoint_load")[0]["step"] == 4
    s = summary(noticed)
    assert s["restarts"] == 1 and s["lost_steps"] == 0
    assert s["final_state_sha256"] == summary(clean)["final_state_sha256"]


def test_an_abandoned_step_leaves_the_random_state_gradients_and_weights_as_they_were(tmp_path):
    """The tiny SDXL UNet draws its noise and timesteps from the random state: a step abandoned after its first
    micro-batch must put that back, or the step taken after it would differ from an uninterrupted run's."""
    import json
    import subprocess
    import sys
    from dataclasses import replace

    from costsim.contract.plan import Plan
    from runner.plan import effective_plan
    from tests.sdxl_tiny import TINY_UNET, sdxl_plan
    plan = Plan.read(sdxl_plan(tmp_path))
    plan = replace(plan, prediction=replace(plan.prediction, per_gpu_batch=2))   # 4 = 2 x 2 micro-batches
    reports = {}
    for mode in ("abandon", "straight"):
        run = tmp_path / mode
        run.mkdir()
        path = effective_plan(plan, runtime=plan.runtime, final_save=False, seed=5,
                              options={"config": str(TINY_UNET)}).write(run / "plan.json")
        out = subprocess.run([sys.executable, "-m", "tests.abandon_probe", str(run), str(path), mode],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        reports[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    abandoned, straight = reports["abandon"], reports["straight"]
    assert abandoned["accumulation"] == 2
    assert abandoned["taken"] is False and abandoned["abandoned_micro_batches"] == 1
    assert abandoned["rng_kept"] and abandoned["weights_kept"] and abandoned["gradients"] == 0
    assert abandoned["optimizer_state"] == 0   # no optimizer step began
    assert abandoned["next_step_taken"] and straight["next_step_taken"]
    assert abandoned["state"] == straight["state"]   # the step after an abandoned one is the step never interrupted
