"""A job is all its lives (costsim.contract.lives): every `runner execute` on a run folder, read from the
folder's telemetry, on literal events worked by hand."""

from pathlib import Path

import pytest

from costsim.contract.lives import VANISHED, lives


def sup(t, event, **fields):
    return {"t": t, "rank": None, "node": 0, "event": event, **fields}


def worker(t, event, **fields):
    return {"t": t, "rank": 0, "world_size": 2, "event": event, **fields}


def steps(t0, first, last, dt=1.0):
    return [worker(t0 + (n - first + 1) * dt, "step", step=n, step_time_s=dt) for n in range(first, last + 1)]


def test_a_notice_a_kill_and_a_resume_are_three_lives():
    """Life 1: fresh, steps 1-10, a notice saves step 10, exit. Life 2: resumed from 10, steps 11-20, killed
    (no exit) with its newest checkpoint at 15. Life 3: resumed from 15: steps 16-20 are trained again
    (5 steps lost), then 21-25 and the end."""
    events = [sup(0, "instance", market="spot", host="a"), sup(0, "launch", attempt=0), worker(5, "start", step=0),
              *steps(5, 1, 10), worker(16, "checkpoint_save", step=10, reason="notice"),
              sup(20, "exit", status="preempted", ended="preempted-notice"),
              sup(100, "instance", market="spot", host="b"), sup(100, "launch", attempt=0),
              worker(110, "start", step=10), *steps(110, 11, 20), worker(116, "checkpoint_save", step=15),
              sup(200, "instance", market="on-demand", host="c"), sup(200, "launch", attempt=0),
              worker(212, "start", step=15), *steps(212, 16, 25), worker(223, "end", step=25),
              sup(225, "exit", status="done", ended="finished")]
    job = lives(events)
    assert [(x.number, x.started, x.ended, x.trained, x.trained_again, x.host) for x in job.lives] == [
        (1, "fresh", "preempted-notice", 10, 0, "a"),
        (2, "resumed from step 10", VANISHED, 10, 0, "b"),
        (3, "resumed from step 15", "finished", 10, 5, "c")]
    assert [x.wall_s for x in job.lives] == [20, 20, 25]   # life 2 ends at its last event (step 20, t = 120)
    assert (job.restarts, job.lost_steps, job.wall_s) == (2, 5, 65)
    assert job.ends == {"preempted-notice": 1, VANISHED: 1, "finished": 1}
    assert job.gpu_hours == 65 * 2 / 3600
    assert [x.first_step_t for x in job.lives] == [6, 111, 213]


def test_a_relaunch_inside_a_life_is_a_restart_and_another_nodes_supervisor_joins_the_life():
    events = [sup(0, "instance", market="on-demand"), {**sup(0, "instance", market="on-demand"), "node": 1},
              worker(1, "start", step=0), *steps(1, 1, 8), sup(10, "restart", attempt=1, reason="failed"),
              worker(12, "start", step=5), *steps(12, 6, 12), sup(20, "exit", status="done", ended="finished"),
              {**sup(20.5, "exit", status="done", ended="finished"), "node": 1}]
    job = lives(events)
    (life,) = job.lives
    assert (life.nodes, life.relaunches, life.trained, life.trained_again, life.reached) == (2, 1, 15, 3, 12)
    assert (job.restarts, job.lost_steps) == (1, 3) and life.ended == "finished"


def test_a_folder_of_an_older_runner_without_instance_events_is_one_life():
    job = lives([worker(0, "start", step=0), *steps(0, 1, 3)])
    assert [(x.number, x.trained, x.ended) for x in job.lives] == [(1, 3, VANISHED)]


def test_the_report_and_calibrate_price_a_restart_by_one_rule():
    """The flagship plan living twice on an H200 (data/measurements/2026-12-02-h200-lives): `runner report`'s
    restart cost and `costsim calibrate`'s restart are one figure (costsim.contract.timing.restart_costs_s),
    computed from the same steady step time."""
    pytest.importorskip("matplotlib")
    from costsim.calibrate import load_run
    from runner.report import measure
    folder = Path(__file__).resolve().parents[1] / "data/measurements/2026-12-02-h200-lives/run"
    run, figures = load_run(str(folder)), measure(folder)
    assert len(run.restart_s) == len(figures["restart_cost_s"]) == 1
    # the same rule: they differ only by the warm-up's 5 steady steps, at the report's mean step and at
    # calibrate's fitted one
    gap = 5 * abs(figures["step_time_s"] - run.point.step_s)
    assert figures["restart_cost_s"][0] == pytest.approx(run.restart_s[0], abs=gap + 0.001)


def test_a_save_in_a_restarts_warm_up_is_charged_to_the_save_not_the_restart():
    """A life resumed from step 13 with a save every 8 steps saves at step 16, inside its warm-up: the step
    that paid it (17: the stall and the room made for it on a small disk; 15.4 s against 3.6 on the H200,
    data/measurements/2026-12-02-h200-fast-resume/second) is left out of the restart, as the steady steps
    leave it out; the planner charges each checkpoint on its own. Without the save, the same start costs
    the same."""
    from costsim.contract.timing import restart_costs_s

    def life(save: bool) -> list[dict]:
        first = [sup(0.0, "instance"), sup(0.0, "launch", attempt=0), worker(1.0, "start", step=0)]
        first += steps(1.0, 1, 13, dt=3.6)
        second = [sup(60.0, "instance"), sup(60.0, "launch", attempt=0), worker(80.0, "start", step=13)]
        times = {14: 90.0, 15: 93.6, 16: 97.2, 17: 97.2 + (15.4 if save else 3.6)}
        times[18] = times[17] + 3.6
        second += [worker(t, "step", step=n, step_time_s=t - times.get(n - 1, 80.0)) for n, t in times.items()]
        if save:
            second.append(worker(times[18] + 1.0, "checkpoint_save", step=16, mode="async", stall_s=2.2,
                                 duration_s=18.4, reason="interval"))
        return first + second

    plain, saved = restart_costs_s(life(False), 3.6), restart_costs_s(life(True), 3.6)
    assert plain == pytest.approx([104.4 - 60.0 - 5 * 3.6])   # launch to step 18's end, less 5 steady steps
    assert saved == pytest.approx(plain)


def test_a_lifes_restart_counts_from_runner_executes_own_start_where_it_was_recorded():
    """`runner execute` checks the plan, the options and the GPUs before its `launch` (1.6-2.0 s on the H200 host
    when it imported torch for them): a later life's restart counts from its process's start (the instance
    event's process_start_t) where the supervisor recorded it, else from the launch."""
    from costsim.contract.timing import restart_costs_s

    def job(recorded: bool) -> list[dict]:
        first = [sup(0.0, "instance"), sup(0.0, "launch", attempt=0), worker(1.0, "start", step=0)]
        first += steps(1.0, 1, 13, dt=3.6)
        extra = {"process_start_t": 58.5} if recorded else {}
        second = [sup(60.0, "instance", **extra), sup(60.0, "launch", attempt=0), worker(80.0, "start", step=13)]
        second += steps(80.0, 14, 18, dt=3.6)
        return first + second

    launch, own = restart_costs_s(job(False), 3.6), restart_costs_s(job(True), 3.6)
    assert own == pytest.approx([launch[0] + 1.5])


def test_a_life_killed_after_its_notice_ends_as_its_notice_said():
    """The reclaim's SIGKILL can come before the runner writes `exit` (a save longer than the notice, a runner
    still starting): the supervisor's `notice` event, written as the SIGTERM came, says how the life ends then.
    An `exit` after it has the last word."""
    events = [sup(0, "instance", market="spot"), worker(5, "start", step=0), *steps(5, 1, 10),
              sup(16, "notice", ended="preempted-notice"), *steps(16, 11, 12),
              sup(100, "instance", market="spot"), worker(105, "start", step=10), *steps(105, 11, 20),
              sup(116, "notice", ended="preempted-notice"), sup(118, "exit", status="preempted", ended="moved"),
              sup(200, "instance", market="on-demand"), worker(205, "start", step=20), *steps(205, 21, 22)]
    job = lives(events)
    assert [x.ended for x in job.lives] == ["preempted-notice", "moved", VANISHED]
    assert [x.wall_s for x in job.lives] == [18, 18, 7]   # life 1 to its last step after the notice
