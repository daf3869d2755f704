"""The costsim commands as a user drives them: exit codes, output contracts, files written."""

import json
import re

import pytest

from costsim.cli import cli
from costsim.contract.plan import SCHEMA, Plan

FAST = ["--trials", "40", "--shortlist", "4", "--jobs", "1"]


def test_every_command_has_help_with_an_example(run_cli):
    for name in cli.commands:
        result = run_cli(name, "--help")
        assert result.exit_code == 0, name
        assert "Example:" in result.stdout, name
        assert "%%" not in result.stdout, name   # click does not %-format help: `90%%` would print as written


def test_plan_sdxl_prints_a_ranked_table_and_writes_plan_json(run_cli, tmp_path):
    out, plot = tmp_path / "plan.json", tmp_path / "plan.png"
    result = run_cli("plan", "--workload", "sdxl", *FAST, "--out", str(out), "--plot", str(plot))
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    header = lines[2]
    for column in ("offering", "GPUs", "policy", "finish h", "cost", "P10/50/90", "met", "worst"):
        assert column in header
    chosen_rows = [line for line in lines if line.startswith("*  ")]
    assert len(chosen_rows) == 1
    assert max(len(line) for line in lines if not line.startswith("wrote ")) <= 120   # the table and its notes
    assert any(line.startswith("* chosen, x misses the target") for line in lines)   # the legend
    wide = run_cli("plan", "--workload", "sdxl", *FAST, "--out", str(out), "--wide").stdout.splitlines()
    for column in ("ckpt", "finish h P10/50/90", "mean cost USD", "P(deadline)", "worst group", "saving", "samples/s",
                   "preemptions"):
        assert column in wide[2]
    assert json.loads(out.read_text())["schema"] == SCHEMA
    plan = Plan.read(out)
    assert plan.prediction.p_deadline >= plan.policy.p_deadline_target
    assert Plan.from_dict(plan.to_dict()) == plan   # what is written reads back as the same plan
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "configurations simulated" in result.stderr   # progress goes to stderr


def test_plan_json_has_chosen_candidates_and_stats(run_cli, tmp_path):
    result = run_cli("plan", "--workload", "sdxl", *FAST, "--format", "json", "--out", str(tmp_path / "p.json"))
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert set(doc) >= {"chosen", "candidates", "stats"}
    assert set(doc["stats"]) >= {"candidates", "trials", "events", "wall_s"}
    assert doc["stats"]["events"] > 0 and doc["stats"]["trials"] == 40
    costs = [c["cost"]["mean"] for c in doc["candidates"] if c["meets_target"]]
    assert doc["chosen"]["prediction"]["cost"]["mean"] == pytest.approx(min(costs))
    for key in ("workload", "resources", "policy", "checkpoint", "prediction", "profile", "created",
                "costsim_version"):
        assert key in doc["chosen"]


def test_plan_is_reproducible_with_a_seed(run_cli, tmp_path):
    runs = [run_cli("plan", "--workload", "sdxl", *FAST, "--seed", "5", "--format", "json",
                    "--out", str(tmp_path / f"{i}.json")).json() for i in range(2)]
    assert runs[0]["candidates"] == runs[1]["candidates"]


def test_plan_csv_has_one_row_per_candidate(run_cli, tmp_path):
    result = run_cli("plan", "--workload", "tiny", "--trials", "10", "--format", "csv", "--out",
                     str(tmp_path / "p.json"))
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("offering,gpu,gpus_per_node,nodes,policy")
    assert len(lines) == 2 and lines[1].startswith("owned/local-cpu,cpu,2,1,owned")


def test_tiny_plan_runs_on_the_local_cpu_with_two_processes(run_cli, tmp_path):
    out = tmp_path / "plan.json"
    assert run_cli("plan", "--workload", "tiny", "--trials", "10", "--out", str(out)).exit_code == 0
    plan = json.loads(out.read_text())
    assert plan["resources"]["offering"] == "owned/local-cpu"
    assert plan["resources"]["gpus_per_node"] == 2 and plan["resources"]["nodes"] == 1
    assert plan["workload"]["model"] == "tiny"


def test_plan_that_no_candidate_can_meet_fails_clearly(run_cli, tmp_path):
    result = run_cli("plan", "--workload", "sdxl", *FAST, "--budget", "1", "--out", str(tmp_path / "p.json"))
    assert result.exit_code == 1
    assert "no candidate reaches" in result.stderr and "--budget" in result.stderr
    assert not (tmp_path / "p.json").exists()


def test_simulate_bare_flags_json_contract(run_cli):
    result = run_cli("simulate", "--work-hours", "10", "--deadline", "14h", "--checkpoint-interval", "1h",
                     "--checkpoint-cost", "5m", "--restart-cost", "10m", "--preemption-mtbf", "6h",
                     "--policy", "greedy", "--spot-price", "1", "--on-demand-price", "3", "--trials", "200",
                     "--per-trial", "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert set(doc["makespan_h"]) == set(doc["cost"]) == {"mean", "p10", "p50", "p90"}
    assert doc["makespan_h"]["p10"] <= doc["makespan_h"]["p50"] <= doc["makespan_h"]["p90"]
    assert doc["cost"]["p10"] <= doc["cost"]["p50"] <= doc["cost"]["p90"]
    assert doc["deadline_h"] == 14.0
    assert "currency" not in doc   # bare prices are in whatever money they were given in
    assert doc["trials"] == 200 and len(doc["per_trial"]) == 200
    assert set(doc["per_trial"][0]) == {"cost", "makespan_h", "met_deadline", "preemptions", "on_demand_from_h"}
    assert doc["deadline_met"] == pytest.approx(sum(t["met_deadline"] for t in doc["per_trial"]) / 200)
    assert doc["preemptions"] > 0


def test_simulate_replays_one_trial_per_trace_file(run_cli, tmp_path):
    # Spot [0, 1800) and [3000, ...): the exact case of test_sim_traces, through the CLI.
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [0, 0, 0, 1, 1] + [0] * 7}))
    result = run_cli("simulate", "--work-hours", str(3000 / 3600), "--deadline", "2h", "--checkpoint-interval",
                     "900s", "--checkpoint-cost", "60s", "--restart-cost", "120s", "--changeover", "60s",
                     "--policy", "greedy", "--spot-price", "1", "--on-demand-price", "3", "--trace", str(trace),
                     "--trace", str(trace), "--per-trial", "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["trials"] == 2
    assert doc["per_trial"][0]["makespan_h"] == pytest.approx(5460 / 3600)
    assert doc["per_trial"][0]["cost"] == pytest.approx(4260 / 3600)


def test_simulate_from_a_workload_and_offering(run_cli):
    """Greedy is deadline-safe (it never misses what on-demand could still meet) and, on a market with
    spot, cheaper on the mean than on-demand throughout: what a user picks it for."""
    args = ("simulate", "--workload", "sdxl", "--offering", "aws/us-east-1/p5en.48xlarge", "--trials", "50",
            "--format", "json")
    greedy = run_cli(*args, "--policy", "greedy")
    assert greedy.exit_code == 0, greedy.stderr
    on_demand = run_cli(*args, "--policy", "on-demand").json()
    doc = greedy.json()
    assert doc["deadline_met"] == 1.0 and doc["preemptions"] > 0
    assert doc["cost"]["mean"] < on_demand["cost"]["mean"]


def test_simulate_table_output(run_cli):
    result = run_cli("simulate", "--work-hours", "2", "--deadline", "3h", "--checkpoint-interval", "30m",
                     "--policy", "on-demand", "--on-demand-price", "2", "--trials", "3")
    assert result.exit_code == 0
    assert "finish (h)" in result.stdout and "deadline met in 3 of 3 trials (100.0%)" in result.stdout
    assert result.stdout.splitlines()[0].split() == ["mean", "P10", "P50", "P90"]


def test_simulate_plots_its_trials_without_changing_what_it_prints(run_cli, tmp_path):
    args = ("simulate", "--work-hours", "10", "--deadline", "14h", "--checkpoint-interval", "1h",
            "--preemption-mtbf", "6h", "--policy", "spot-only", "--spot-price", "1", "--trials", "100",
            "--format", "json")
    plot = tmp_path / "trials.png"
    plotted = run_cli(*args, "--plot", str(plot))
    assert plotted.exit_code == 0, plotted.stderr
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plotted.json() == run_cli(*args).json()   # no per-trial list unless --per-trial asks
    refused = run_cli(*args, "--plot", str(tmp_path / "trials.txt"))
    assert refused.exit_code == 2 and "--plot" in refused.stderr


def test_catalog_lists_dated_prices_and_filters_by_gpu(run_cli):
    result = run_cli("catalog", "--gpu", "H100", "--format", "json")
    rows = result.json()
    assert rows and all(r["gpu"] == "H100" for r in rows)
    assert all(r["read_date"] and r["source"] for r in rows)
    assert {r["offering"].split("/")[0] for r in rows} >= {"aws", "gcp", "azure", "lambda"}
    table = run_cli("catalog")
    assert "prices read" in table.stdout and "p5.48xlarge" in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 120


def test_gpu_names_are_read_as_the_catalog_spells_them(run_cli, tmp_path):
    lower = run_cli("catalog", "--gpu", "h100", "--format", "json").json()
    assert lower and lower == run_cli("catalog", "--gpu", "H100", "--format", "json").json()
    runs = [run_cli("plan", "--workload", "sdxl", "--gpu", gpu, *FAST, "--seed", "3", "--format", "json",
                    "--out", str(tmp_path / f"{gpu}.json")).json()["chosen"]["resources"] for gpu in ("h200", "H200")]
    assert runs[0] == runs[1] and runs[0]["gpu"] == "H200"
    refused = run_cli("plan", "--workload", "sdxl", "--gpu", "A100", "--out", str(tmp_path / "x.json"))
    assert refused.exit_code == 2 and "A100-40GB, A100-80GB" in refused.stderr   # ambiguous: the allowed names


def test_plan_header_and_finish_column_fit_the_job(run_cli, tmp_path):
    """A target of 0.001 is not printed as 0.00, and a CPU drill's finish is not 0.00/0.00/0.00 hours."""
    risky = run_cli("plan", "--workload", "sdxl", "--risk", "0.999", *FAST, "--out", str(tmp_path / "r.json"))
    assert "P(deadline) >= 0.001" in risky.stdout.splitlines()[0]
    tiny = run_cli("plan", "--workload", "tiny", "--trials", "10", "--out", str(tmp_path / "t.json"))
    header, row = tiny.stdout.splitlines()[2], next(li for li in tiny.stdout.splitlines() if li.startswith("*  "))
    finish = json.loads((tmp_path / "t.json").read_text())["prediction"]["makespan_s"]["p50"]
    unit, per = ("s", 1) if finish < 60 else ("m", 60)
    assert f"finish {unit}" in header and "finish h" not in header
    cell = re.split(r"\s{2,}", row)[4]   # mark, offering, GPUs, policy, finish P10/P50/P90
    assert float(cell.split("/")[1]) == pytest.approx(finish / per, abs=0.5)
    # a table whose every P90 is never (a 4-node spot-only gang) still reads its P10 and P50 in hours
    gang = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--nodes", "4", "--policy", "spot-only", *FAST,
                   "--seed", "0", "--out", str(tmp_path / "g.json")).stdout.splitlines()
    rows = [re.split(r"\s{2,}", li)[4] for li in gang if li.startswith("x  ")]
    assert "finish h" in gang[2] and rows and all(cell.endswith("/never") for cell in rows)


def test_outputs_are_written_with_the_users_umask(run_cli, tmp_path):
    import os
    import stat
    out = tmp_path / "plan.json"
    assert run_cli("plan", "--workload", "tiny", "--trials", "10", "--out", str(out)).exit_code == 0
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~mask
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".plan.json.")]   # no temp file left


def test_simulate_takes_many_trace_files_after_one_flag_or_a_folder(run_cli, tmp_path):
    for i in range(3):
        (tmp_path / f"{i}.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [0] * 20}))
    base = ["simulate", "--work-hours", "1", "--deadline", "2h", "--checkpoint-interval", "30m", "--spot-price", "1",
            "--format", "json"]
    files = [str(tmp_path / f"{i}.json") for i in range(3)]
    assert run_cli(*base, "--trace", *files).json()["trials"] == 3
    assert run_cli(*base, "--trace", str(tmp_path)).json()["trials"] == 3
    stray = run_cli(*base, files[0])
    assert stray.exit_code == 2 and "trace files follow --trace" in stray.stderr


def test_simulate_per_trial_lists_each_trial_and_when_it_went_on_demand(run_cli):
    """Greedy on 20 real windows: --per-trial lists one row per window with the time it first went
    on-demand, which the JSON carries too (the table used to be the same with or without it)."""
    from pathlib import Path
    windows = sorted((Path(__file__).resolve().parents[1] / "data" / "traces" / "cbl-us-west-2a-v100").glob("*.json"))
    args = ["simulate", "--work-hours", "12.9", "--deadline", "16h", "--changeover", "50m", "--checkpoint-interval",
            "20m", "--policy", "greedy", "--spot-price", "0.97", "--on-demand-price", "3.06",
            "--trace", *map(str, windows[:20])]
    table = run_cli(*args, "--per-trial")
    assert table.exit_code == 0, table.stderr
    rows = [line for line in table.stdout.splitlines() if line.split(" ")[0].endswith(".json")]
    assert len(rows) == 20
    trials = run_cli(*args, "--per-trial", "--format", "json").json()["per_trial"]
    switched = [t["on_demand_from_h"] for t in trials if t["on_demand_from_h"] is not None]
    assert 0 < len(switched) <= 20 and f"on-demand in {len(switched)} of 20 trials" in table.stdout
    assert all(0 <= h <= t["makespan_h"] for t in trials if (h := t["on_demand_from_h"]) is not None)
    assert "on-demand from h" not in run_cli(*args).stdout   # without the flag: the summary only


def test_simulate_of_a_workload_replays_the_traces_it_is_given(run_cli, tmp_path):
    """--workload/--offering with --trace: the traces are the spot market (they were ignored, and the
    offering's model drawn while the output said 'one per trace file'). Spot never there: spot-only never
    finishes; spot always there: it finishes without a preemption."""
    never, always = tmp_path / "never.json", tmp_path / "always.json"
    never.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1] * 48}))
    always.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [0] * 2000}))
    args = ("simulate", "--workload", "sdxl", "--offering", "aws/us-east-1/p5en.48xlarge", "--policy", "spot-only",
            "--format", "json", "--trace")
    stranded = run_cli(*args, str(never)).json()
    assert stranded["trials"] == 1 and stranded["deadline_met"] == 0 and stranded["unfinished"] == 1
    assert stranded["past_trace_end"] == 1   # the 8 h trace ended long before the job: said, not hidden
    steady = run_cli(*args, str(always)).json()
    assert steady["deadline_met"] == 1 and steady["preemptions"] == 0 and steady["past_trace_end"] == 0
    said = run_cli(*args[:-3], "--trace", str(never))
    assert "1 ran past their trace's end" in said.stdout


def test_simulate_replays_a_plan_as_chosen(run_cli, tmp_path):
    """`simulate --plan`: the plan's chosen configuration with its own trials and seed gives the plan's own
    figures (the same draws); on a trace where spot never comes back, its spot-only choice never finishes;
    a flag that would change the plan is refused."""
    plan = tmp_path / "plan.json"
    made = run_cli("plan", "--workload", "sdxl", "--gpu", "H200", "--risk", "0.4", "--trials", "200", "--out", str(plan),
                   "--format", "json")
    assert made.exit_code == 0, made.stderr
    chosen = json.loads(plan.read_text())
    assert chosen["prediction"]["market"]["groups"]   # drawn from the capacity ensemble, replayed from it
    replayed = run_cli("simulate", "--plan", str(plan), "--format", "json")
    assert replayed.exit_code == 0, replayed.stderr
    doc = replayed.json()
    assert doc["trials"] == chosen["prediction"]["trials"] == 200
    assert doc["deadline_met"] == pytest.approx(chosen["prediction"]["p_deadline"], abs=1e-12)
    assert doc["cost"]["mean"] == pytest.approx(chosen["prediction"]["cost"]["mean"], rel=1e-9)
    assert doc["cost"]["p90"] == pytest.approx(chosen["prediction"]["cost"]["p90"], rel=1e-9)
    assert doc["currency"] == chosen["resources"]["currency"] == "USD"   # the plan's money, said
    assert "cost (USD)" in run_cli("simulate", "--plan", str(plan)).stdout
    assert chosen["policy"]["name"] == "spot-only"   # the choice at this risk: replayed on no capacity
    never = tmp_path / "never.json"
    never.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1] * 48}))
    stranded = run_cli("simulate", "--plan", str(plan), "--format", "json", "--trace", str(never)).json()
    assert stranded["trials"] == 1 and stranded["unfinished"] == 1 and stranded["deadline_met"] == 0
    clash = run_cli("simulate", "--plan", str(plan), "--policy", "greedy")
    assert clash.exit_code == 2 and "--plan replays the plan as chosen: --policy cannot change it" in clash.stderr
