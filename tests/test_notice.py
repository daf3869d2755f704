"""The notice rule (costsim.contract.notice): what it decides, what the simulator prices with it, and what
the runner does with it (real DDP runs on CPU, gloo, 2 processes)."""

import math
from dataclasses import replace

import pytest

from costsim import policies
from costsim.contract.notice import ALWAYS, KEEP, NOTHING, SAVE, decide
from costsim.contract.plan import Plan
from costsim.sim.job import JobParams
from costsim.sim.market import TraceTimeline
from costsim.sim.trial import MarketPrice, run_trial
from tests.runner_helpers import events, execute, summary, tiny_plan


@pytest.mark.parametrize("figures, action, said", [
    (dict(redo_s=0, save_s=5), NOTHING, "no step since"),
    (dict(redo_s=30, save_s=5), SAVE, "30 s of training to keep, a save takes 5 s"),
    (dict(redo_s=30, save_s=5, wait_s=10, left_s=20), SAVE, "after 10 s of the write in flight"),
    (dict(redo_s=30, save_s=5, wait_s=16, left_s=20), KEEP, "would not land in the 20 s left"),
    (dict(redo_s=4, save_s=5), KEEP, "cost less to redo than a save (5 s)"),
    (dict(redo_s=5, save_s=5), KEEP, "cost less to redo"),
    (dict(redo_s=4, save_s=5, left_s=1, mode=ALWAYS), SAVE, "notice_save is always"),
    (dict(redo_s=0, save_s=5, mode=ALWAYS), NOTHING, "no step since"),
])
def test_the_rule_saves_what_is_worth_more_than_the_save_and_lands_in_time(figures, action, said):
    choice = decide(**figures)
    assert choice.action == action and said in choice.reason
    assert choice.save is (action == SAVE)


PRICES = {"spot": MarketPrice(per_hour=1.0), "on-demand": MarketPrice(per_hour=3.0)}
TRACE = [0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0]   # spot [0, 1800) and [3000, 7200): 600 s ticks


@pytest.mark.parametrize("mode, lost, log", [
    # the write of 1600 s lands at 1722; 18 s since it cost less to redo than a 60 s save: the job lets them go
    ("auto", 18, [(1680, "notice", ""), (1722, "checkpoint", ""), (1800, "preempted", "spot")]),
    # always: a second save after the write, 1722-1782, keeps them (it lands before the reclaim at 1800)
    ("always", 0, [(1680, "notice", ""), (1722, "checkpoint", ""), (1782, "checkpoint", ""),
                   (1800, "preempted", "spot")]),
])
def test_the_simulator_prices_the_runners_rule_at_a_notice_during_a_write(mode, lost, log):
    """Work 3000 s, a checkpoint every 1600 s (stall 2 s, write 60 s), notice 120 s: the stall ends at 1662
    (changeover 60 + 1600 + 2), the notice comes at 1680 with the write in flight and 18 s trained since."""
    p = JobParams(work_s=3000, deadline_s=20000, checkpoint_interval_s=1600, checkpoint_s=60, checkpoint_stall_s=2,
                  changeover_s=60, restart_s=120, notice_s=120, notice_save=mode)
    out = run_trial(p, policies.get("spot-only"), TraceTimeline(TRACE, 600), PRICES, record_log=True)
    assert out.record.log[2:2 + len(log)] == log
    assert out.lost_work_s == pytest.approx(lost) and out.preemptions == 1


def test_a_plan_refuses_an_unknown_notice_mode(tmp_path):
    plan = tiny_plan(tmp_path)
    text = plan.read_text().replace('"notice_save": "always"', '"notice_save": "sometimes"')
    plan.write_text(text)
    from costsim.errors import InputError
    with pytest.raises(InputError, match=r"checkpoint.notice_save: got 'sometimes'; allowed: auto, always"):
        Plan.read(plan)


# -- the runner --------------------------------------------------------------------------------------
STEPS = "300"
PACE = ("--option", "pace=5ms")   # steps of at least 5 ms: the ranks' sync points (every ~0.5 s) come every ~100 steps,
# so the notice is agreed on well before the end (a notice past the last sync point lets the job finish)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The tiny plan under the rule, with no periodic checkpoint before the end (the notice's choice is
    all there is), and the clean run it must end equal to."""
    folder = tmp_path_factory.mktemp("notice")
    plan = Plan.read(tiny_plan(folder, interval_steps=None, notice_save="auto"))
    plan = replace(plan, checkpoint=replace(plan.checkpoint, interval_s=1e6))
    clean = folder / "clean"
    result = execute(plan.write(folder / "plan.json"), clean, "--steps", STEPS, "--seed", "3", *PACE)
    assert result.returncode == 0, result.stderr[-3000:]
    return plan, summary(clean)



@pytest.mark.slow
@pytest.mark.parametrize("planned_save_s, notice_s, action, said", [
    (1e-4, None, SAVE, "of training to keep"),           # 100 steps of 5 ms or more against a tenth of a ms
    (1000.0, None, KEEP, "cost less to redo"),            # no save measured yet: the plan's 1000 s save
    (1e-4, 1.0, KEEP, "would not land"),                  # a 1 s notice leaves nothing after the exit's margin
])
def test_the_runner_decides_a_notice_by_the_rule_and_resumes_to_the_same_state(base, tmp_path, planned_save_s,
                                                                               notice_s, action, said):
    plan, clean = base
    plan = replace(plan, prediction=replace(plan.prediction, checkpoint_save_s=planned_save_s),
                   resources=replace(plan.resources, spot_notice_s=notice_s))
    path = plan.write(tmp_path / "plan.json")
    run = tmp_path / "run"
    result = execute(path, run, "--steps", STEPS, "--seed", "3", *PACE, "--inject-preemptions", "term@100")
    assert result.returncode == 0, result.stderr[-3000:]
    notice = [e for e in events(run, "preempted") if e["kind"] == "notice"]
    assert len(notice) == 1 and notice[0]["decision"] == action and said in notice[0]["reason"]
    saved = [e["step"] for e in events(run, "checkpoint_save") if e["reason"] == "notice"]
    resumed = events(run, "start")[1]["step"]
    if action == SAVE:
        assert saved == [notice[0]["step"]] == [notice[0]["emergency_checkpoint"]] and resumed == saved[0]
    else:   # nothing saved: the second life starts over from step 0 and trains those steps again
        assert saved == [] and notice[0].get("emergency_checkpoint") is None and resumed == 0
        assert summary(run)["lost_steps"] == notice[0]["step"]
    if notice_s is not None:
        assert notice[0]["left_s"] < 0 and math.isfinite(notice[0]["left_s"])
    else:
        assert "left_s" not in notice[0]   # no notice known: none is weighed
    assert summary(run)["final_state_sha256"] == clean["final_state_sha256"]


@pytest.mark.slow
def test_a_later_life_weighs_the_saves_its_job_measured_before_the_plans_figure(base, tmp_path):
    """The plan says a save takes 1000 s; the job's first life (steps 0-100, saves at 50 and 100) measured
    milliseconds. The second life gets the notice at its first sync point, step 150, before it has saved
    anything itself: it weighs 50 paced steps (5 ms each) against the earlier lives' save, and saves."""
    plan, _ = base
    plan = replace(plan, prediction=replace(plan.prediction, checkpoint_save_s=1000.0),
                   checkpoint=replace(plan.checkpoint, interval_steps=50))
    path, run = plan.write(tmp_path / "plan.json"), tmp_path / "run"
    first = execute(path, run, "--steps", "100", "--seed", "3", *PACE)
    assert first.returncode == 0, first.stderr[-3000:]
    second = execute(path, run, "--steps", "200", "--seed", "3", *PACE, "--inject-preemptions", "term@120")
    assert second.returncode == 0, second.stderr[-3000:]
    notice = [e for e in events(run, "preempted") if e["kind"] == "notice"]
    earlier = [e["duration_s"] for e in events(run, "checkpoint_save") if e["step"] <= 100]
    assert len(notice) == 1 and notice[0]["decision"] == SAVE, notice
    # the event rounds its figures to the millisecond
    assert notice[0]["save_s"] < 1.0 and min(earlier) - 1e-3 <= notice[0]["save_s"] <= max(earlier) + 1e-3


def test_a_run_whose_checkpoints_stay_on_its_disk_prices_its_notice_save_without_the_upload(run_cli, tmp_path):
    """The plan's checkpoint_save_s includes the upload to the object store it priced (prediction.checkpoint_upload_s,
    the checkpoint's bytes at the store's write rate). Until a run measures a save, its notice rule takes the plan's:
    with the upload where its checkpoints go to an s3:// store, without it where they stay on the node's disk (the
    H200 plan's 48.3 s against a 20 s local write on an H100, 2026-12-06)."""
    from runner.plan import planned_save_s
    out = tmp_path / "plan.json"
    result = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--trials", "20", "--out", str(out))
    assert result.exit_code == 0, result.stderr
    plan = Plan.read(out)
    p, c = plan.prediction, plan.checkpoint
    assert c.storage_kind == "object" and p.checkpoint_upload_s is not None
    assert 0 < p.checkpoint_upload_s < p.checkpoint_save_s
    assert planned_save_s(plan) == pytest.approx(p.checkpoint_save_s - p.checkpoint_upload_s)
    to_store = replace(plan, checkpoint=replace(c, location="s3://ckpt/sdxl"))
    assert planned_save_s(to_store) == p.checkpoint_save_s
    older = replace(plan, prediction=replace(p, checkpoint_upload_s=None))   # plans before the field: as before
    assert planned_save_s(older) == p.checkpoint_save_s
    assert Plan.read(plan.write(tmp_path / "again.json")).prediction.checkpoint_upload_s == p.checkpoint_upload_s
