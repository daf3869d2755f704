"""Buy vs cloud: the fleet model on small schedules worked by hand, scaling policies where they
should differ, the seed articles' case, and the compare command."""

import json

import pytest

from costsim import cost
from costsim.compare import seed_arithmetic
from costsim.fleet.demand import Job, Poisson, Recurring, generate
from costsim.fleet.strategies import SpotTerms, Strategy, run

H = 3600.0
JOBS = [Job("a", 0, 8, 2 * H, 6 * H), Job("b", 1 * H, 8, 2 * H, 6 * H), Job("c", 10 * H, 8, 1 * H, None)]
OWN = cost.Ownership(price=8760 * 5, life_years=5)   # 1 per hour, nothing else


def od(**kw):
    return Strategy(name="x", kind="on-demand", gpus_per_node=8, node_price_h=10.0, **kw)


def test_owned_server_by_hand():
    r = run(Strategy(name="own", kind="owned", gpus_per_node=8, ownership=OWN), JOBS, 24 * H)
    # b waits for a (1 h); 5 busy hours of 24 on 8 GPUs; 1/h for 24 h
    assert r.waits_s == [0, 1 * H, 0]
    assert r.utilization == pytest.approx(5 / 24)
    assert r.total_cost == pytest.approx(24.0)
    assert r.cost_per_used_gpu_hour == pytest.approx(24.0 / 40)
    assert r.idle_paid_gpu_hours == pytest.approx(8 * 24 - 40)
    assert r.deadline_misses == 0


def test_idle_timeout_by_hand():
    r = run(od(scaling="idle-timeout", provision_s=600, idle_timeout_s=1800), JOBS, 24 * H)
    # three nodes started (a, b overlap; c later), each billed provision + run + 30 min idle
    assert r.waits_s == [600, 600, 600]
    assert r.total_cost == pytest.approx((2 + 1 / 6 + 0.5) * 2 * 10 + (1 + 1 / 6 + 0.5) * 10)
    assert r.idle_paid_gpu_hours == pytest.approx((3 * (1 / 6 + 0.5)) * 8)


def test_idle_timeout_reuses_a_warm_node():
    jobs = [Job("a", 0, 8, 1 * H), Job("b", 1.25 * H, 8, 1 * H)]
    r = run(od(scaling="idle-timeout", provision_s=600, idle_timeout_s=1800), jobs, 24 * H)
    # a ends at 1h10; b arrives at 1h15 and takes the warm node with no wait; stopped at 2h45
    assert r.waits_s == [600, 0]
    assert r.total_cost == pytest.approx(2.75 * 10)


def test_always_on_queue_depth_and_schedule_by_hand():
    assert run(od(scaling="always-on", nodes=1), JOBS, 24 * H).total_cost == pytest.approx(240.0)
    queue = run(od(scaling="queue-depth", max_nodes=1), JOBS, 24 * H)
    assert queue.total_cost == pytest.approx(50.0) and queue.waits_s == [0, 1 * H, 0]
    sched = run(od(scaling="schedule", nodes=1, windows=((0, 5 * H), (10 * H, 11 * H))), JOBS, 24 * H)
    assert sched.total_cost == pytest.approx(60.0) and sched.idle_paid_gpu_hours == pytest.approx(8.0)


def test_schedule_window_waits_and_overruns():
    jobs = [Job("late", 6 * H, 8, 3 * H)]   # arrives after the 0-5 h window: waits for 10 h, runs to 13 h
    r = run(od(scaling="schedule", nodes=1, windows=((0, 5 * H), (10 * H, 11 * H))), jobs, 24 * H)
    assert r.waits_s == [4 * H]
    assert r.total_cost == pytest.approx((5 + 3) * 10)   # window 1 billed 5 h, window 2 extended to 13 h


def test_hybrid_bursts_when_the_owned_wait_breaks_the_deadline():
    jobs = [Job("a", 0, 8, 4 * H, 10 * H), Job("b", 1 * H, 8, 2 * H, 2.5 * H), Job("c", 2 * H, 8, 2 * H, 10 * H)]
    burst = od(scaling="idle-timeout", idle_timeout_s=0)
    r = run(Strategy(name="hy", kind="hybrid", gpus_per_node=8, ownership=OWN, burst=burst), jobs, 24 * H)
    # b would wait 3 h for the owned server but has only 0.5 h of slack: it bursts; c may wait 2 h
    assert r.burst_jobs == 1 and r.deadline_misses == 0
    assert r.waits_s == [0, 0, 2 * H]
    assert r.total_cost == pytest.approx(24.0 + 2 * 10)


def test_owned_counts_jobs_too_big_for_it_as_unserved_not_late():
    big = Job("big", 0, 16, H, ref="4711")
    r = run(Strategy(name="own", kind="owned", gpus_per_node=8, ownership=OWN), [big] + JOBS, 24 * H)
    assert r.unserved_jobs == [big] and r.deadline_misses == 0 and r.waits_s == [0, 1 * H, 0]
    assert r.used_gpu_hours == sum(j.gpus * j.duration_s for j in JOBS) / H and r.unserved_gpu_hours == 16
    assert r.as_dict()["unserved_jobs"] == ["4711"]


BURSTY = [Poisson(name="burst", rate_per_s=3 / 86400, gpu_choices=((8, 1.0),), duration_median_s=2 * H)]
PERIODIC = [Recurring(name="nightly", period_s=86400, offset_s=20 * H, duration_s=3 * H, gpus=8)]


def test_idle_timeout_beats_always_on_for_bursty_demand():
    jobs = generate(BURSTY, 60 * 86400, seed=1)
    idle = run(od(scaling="idle-timeout", provision_s=300, idle_timeout_s=1800), jobs, 60 * 86400)
    always = run(od(scaling="always-on", nodes=2), jobs, 60 * 86400)
    assert idle.total_cost < 0.5 * always.total_cost


def test_schedule_beats_idle_timeout_and_always_on_for_periodic_demand():
    jobs = generate(PERIODIC, 30 * 86400, seed=0)
    sched = run(od(scaling="schedule", nodes=1, windows=((20 * H, 23 * H),)), jobs, 30 * 86400)
    idle = run(od(scaling="idle-timeout", provision_s=600, idle_timeout_s=1800), jobs, 30 * 86400)
    always = run(od(scaling="always-on", nodes=1), jobs, 30 * 86400)
    assert sched.total_cost == pytest.approx(30 * 3 * 10)          # exactly the used hours
    assert idle.total_cost == pytest.approx(30 * (3 + 1 / 6 + 0.5) * 10)
    assert sched.total_cost < idle.total_cost < always.total_cost
    assert max(sched.waits_s) == 0 and min(idle.waits_s) == 600


def test_spot_strategy_pays_the_job_models_overhead():
    spot = SpotTerms(spot_price_h=3.0, on_demand_price_h=10.0, mtbf_s=2 * H, wait_mean_s=1 * H, notice_s=120,
                     checkpoint_s=60, restart_s=300)
    jobs = generate(PERIODIC, 20 * 86400, seed=0)
    r = run(Strategy(name="spot", kind="spot", gpus_per_node=8, node_price_h=3.0, spot=spot), jobs, 20 * 86400, seed=3)
    list_cost = r.used_gpu_hours / 8 * 3.0
    assert list_cost < r.total_cost < r.used_gpu_hours / 8 * 10.0   # more than the list discount, less than OD


def test_seed_articles_arithmetic():
    figures = seed_arithmetic(650_000, 3, 4, 0.3)
    assert figures["daily_cost"] == pytest.approx(593.61, abs=0.01)
    assert figures["seed_per_gpu_hour"] == pytest.approx(1.855, abs=0.001)      # daily x utilisation
    assert figures["correct_per_used_gpu_hour"] == pytest.approx(20.61, abs=0.01)
    assert figures["error_factor"] == pytest.approx(1 / 0.3 ** 2)


def test_compare_seed_case_json(run_cli):
    doc = run_cli("compare", "--scenario", "seed-a100", "--format", "json").json()
    assert doc["currency"] == "CNY"
    rates = {s["name"]: s["cost_per_used_gpu_hour"] for s in doc["strategies"]}
    assert rates["own-4xA100"] == pytest.approx(650_000 / (3 * 8760 * 4 * 0.3))
    assert rates["cloud-A100-4.5"] == pytest.approx(4.5)
    assert doc["break_even"] == [{"owned": "own-4xA100", "versus": "cloud-A100-4.5", "utilization": None,
                                  "owned_unserved_jobs": 0}]


def test_compare_h100_team_table_json_and_plot(run_cli, tmp_path):
    plot = tmp_path / "c.png"
    table = run_cli("compare", "--scenario", "h100-team", "--plot", str(plot))
    assert table.exit_code == 0 and "break-even utilisation" in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 120 and "idle GPU-h: GPU-hours" in table.stdout
    assert plot.read_bytes()[:4] == b"\x89PNG"
    doc = run_cli("compare", "--scenario", "h100-team", "--format", "json").json()
    kinds = {s["kind"] for s in doc["strategies"]}
    assert kinds == {"owned", "on-demand", "spot", "hybrid"}
    for s in doc["strategies"]:
        assert {"name", "kind", "total_cost", "cost_per_used_gpu_hour", "utilization"} <= set(s)
    assert all(b["utilization"] is None or 0 < b["utilization"] <= 1 for b in doc["break_even"])


def test_compare_from_flags(run_cli):
    result = run_cli("compare", "--fleet", "h100-team", "--hardware", "hgx-h100-8", "--horizon", "30d",
                     "--format", "json")
    assert result.exit_code == 0, result.stderr
    names = [s["name"] for s in result.json()["strategies"]]
    assert names[0] == "own-1x-hgx-h100-8" and any(n.endswith("-spot") for n in names)


@pytest.mark.parametrize("args, fragment", [
    (["--scenario", "nope"], "built-ins"),
    (["--fleet", "h100-team", "--hardware", "dgx-z", "--horizon", "1y"], "unknown SKU"),
    (["--fleet", "h100-team"], "--hardware"),
    (["--scenario", "seed-a100", "--utilization", "0,2"], "--utilization"),
])
def test_compare_bad_input(run_cli, args, fragment):
    result = run_cli("compare", *args)
    assert result.exit_code == 2 and fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_scenario_in_another_currency_needs_an_explicit_rate(run_cli, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\ncurrency: EUR\nhorizon: 1y\nutilization: [0.5]\nstrategies:\n"
                    "  - {name: o, kind: owned, sku: hgx-h100-8}\n")
    result = run_cli("compare", "--scenario", str(path))
    assert result.exit_code == 2 and "usd_rate" in result.stderr
    path.write_text(path.read_text().replace("strategies:", "usd_rate: {rate: 0.9, date: 2026-11-01, source: ECB}\n"
                                                            "strategies:"))
    assert run_cli("compare", "--scenario", str(path)).exit_code == 0


def test_window_crossing_midnight_is_refused(run_cli, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({"name": "s", "horizon": "10d", "fleet": "h100-team", "strategies": [
        {"name": "w", "kind": "on-demand", "offering": "aws/us-east-1/p5.48xlarge", "scaling": "schedule",
         "windows": ["22:00-02:00"]}]}))
    result = run_cli("compare", "--scenario", str(path))
    assert result.exit_code == 2 and "crosses midnight" in result.stderr


def test_fleet_trace_csv_is_replayed(run_cli, tmp_path):
    (tmp_path / "jobs.csv").write_text("name,submit,gpus,duration,deadline\n"
                                       "train,0h,8,2h,6h\neval,1h,8,2h,6h\nlate,10h,8,1h,\n")
    (tmp_path / "fleet.yaml").write_text("name: f\njobs:\n  - kind: trace\n    file: jobs.csv\n")
    (tmp_path / "s.yaml").write_text(
        "name: s\nhorizon: 24h\nfleet: fleet.yaml\nstrategies:\n"
        "  - {name: q, kind: on-demand, offering: aws/us-east-1/p5.48xlarge, scaling: queue-depth, max_nodes: 1}\n")
    doc = run_cli("compare", "--scenario", str(tmp_path / "s.yaml"), "--format", "json").json()
    (row,) = doc["strategies"]
    assert doc["jobs"] == 3 and row["jobs"] == 3
    # the same schedule as test_always_on_queue_depth_and_schedule_by_hand, at p5's price and delay
    assert row["total_cost"] == pytest.approx((5 + 3 * 480 / 3600) * 55.04)


def test_fleet_trace_with_a_bad_row(run_cli, tmp_path):
    (tmp_path / "jobs.csv").write_text("submit,gpus,duration\n0h,eight,2h\n")
    (tmp_path / "fleet.yaml").write_text("name: f\njobs:\n  - kind: trace\n    file: jobs.csv\n")
    (tmp_path / "s.yaml").write_text("name: s\nhorizon: 24h\nfleet: fleet.yaml\nstrategies:\n"
                                     "  - {name: own, kind: owned, sku: hgx-h100-8}\n")
    result = run_cli("compare", "--scenario", str(tmp_path / "s.yaml"))
    assert result.exit_code == 2 and "jobs.csv line 2" in result.stderr and "gpus" in result.stderr


def test_horizon_flag_replaces_a_scenarios_own_or_is_refused_where_the_demand_ends(run_cli, tmp_path):
    """--horizon with --scenario runs that long (it used to be ignored); a replayed job trace only as
    long as it covers."""
    year = run_cli("compare", "--scenario", "h100-team", "--format", "json").json()
    quarter = run_cli("compare", "--scenario", "h100-team", "--horizon", "13w", "--format", "json").json()
    assert quarter["horizon_s"] == 13 * 7 * 86400 and year["horizon_s"] == 365 * 86400
    assert 0.15 < quarter["jobs"] / year["jobs"] < 0.35
    (tmp_path / "jobs.csv").write_text("name,submit,gpus,duration,deadline\ntrain,0h,8,2h,6h\nlate,10h,8,1h,\n")
    (tmp_path / "fleet.yaml").write_text("name: f\njobs:\n  - kind: trace\n    file: jobs.csv\n")
    (tmp_path / "s.yaml").write_text("name: s\nhorizon: 24h\nfleet: fleet.yaml\nstrategies:\n"
                                     "  - {name: own, kind: owned, sku: hgx-h100-8}\n")
    assert run_cli("compare", "--scenario", str(tmp_path / "s.yaml"), "--horizon", "11h").exit_code == 0
    result = run_cli("compare", "--scenario", str(tmp_path / "s.yaml"), "--horizon", "3y")
    assert result.exit_code == 2 and "longer than the job trace" in result.stderr and "11s" not in result.stderr
