"""The costsim command line: each command parses its flags and makes one library call."""

from __future__ import annotations

import time
from pathlib import Path

import click

from costsim import io, report
from costsim.entry import run
from costsim.catalog import find_offering, offerings_for
from costsim.errors import InputError
from costsim.planfile import plan_document
from costsim.planner import PlanOptions, plan
from costsim.sim.policies import POLICIES
from costsim.units import DURATION_HELP, format_duration, parse_duration_s
from costsim.whatif import BareJob, bare_config, summary, workload_config

FORMATS = ["table", "json", "csv"]


class Duration(click.ParamType):
    """A click parameter for durations: 90s, 5m, 2h, 3d, 1y."""

    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            return parse_duration_s(value, source=f"--{param.name.replace('_', '-')}", field=param.name,
                                    allow_zero=param.name in ZERO_OK)
        except InputError:
            self.fail(f"{value!r}: expected {DURATION_HELP}", param, ctx)


ZERO_OK = {"checkpoint_cost", "restart_cost", "changeover", "notice", "capacity_wait"}
DURATION = Duration()
POSITIVE = click.FloatRange(min=0, min_open=True)


def output_options(command):
    """The shared --format option (JSON goes to stdout; progress and notes to stderr)."""
    return click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
                        help="table for people, json or csv for programs")(command)


def progress_line(label: str, every_s: float = 1.0):
    """Progress on stderr: at most one line a second, and always the last."""
    last = [0.0]

    def report_progress(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] >= every_s:
            last[0] = now
            click.echo(f"{label}: {done}/{total} configurations simulated", err=True)
    return report_progress


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="costsim")
def cli():
    """Plan, cost and calibrate GPU training jobs across spot, on-demand and owned hardware.

    Example: costsim plan --workload sdxl --plot plan.png
    """


@cli.command("plan")
@click.option("--workload", required=True, help="workload YAML file or built-in name (sdxl, tiny)")
@click.option("--deadline", type=DURATION, help="override the workload's deadline, e.g. 36h")
@click.option("--budget", type=POSITIVE, help="largest acceptable P90 cost")
@click.option("--risk", type=click.FloatRange(0, 1, max_open=True), help="acceptable probability of missing "
              "the deadline (default: 1 - the workload's p_deadline)")
@click.option("--trials", type=click.IntRange(min=10), default=400, show_default=True,
              help="Monte Carlo trials per shortlisted candidate")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--profile", "profile_ref", help="throughput profile file to use instead of the workload's")
@click.option("--gpu", "gpus", multiple=True, help="only these GPU types (repeatable)")
@click.option("--shortlist", type=click.IntRange(min=1), default=16, show_default=True,
              help="candidates kept by the analytic screen for Monte Carlo")
@click.option("--jobs", type=click.IntRange(min=1), help="worker processes (default: CPU count)")
@click.option("--out", default="plan.json", show_default=True, type=click.Path(dir_okay=False),
              help="where to write the chosen plan")
@click.option("--plot", type=click.Path(dir_okay=False), help="draw cost vs P90 finish to this PNG")
@output_options
def plan_command(workload, deadline, budget, risk, trials, seed, profile_ref, gpus, shortlist, jobs, out,
                 plot, fmt):
    """Rank ways to run a training job by cost and deadline risk; write the best as plan.json.

    Example: costsim plan --workload data/workloads/sdxl.yaml --trials 400 --plot plan.png
    """
    spec = io.load_workload(workload)
    profile = io.load_profile(profile_ref or spec.profile)
    options = PlanOptions(trials=trials, seed=seed, risk=risk, deadline_s=deadline, budget=budget,
                          shortlist=shortlist, jobs=jobs)
    result = plan(spec, profile, offerings_for(spec, tuple(gpus) or None), options,
                  progress=progress_line("plan"))
    chosen = plan_document(result, result.chosen) if result.chosen else None
    if chosen:
        io.write_atomic(out, report.to_json(chosen) + "\n")
    if plot:
        report.plot_plan(result, plot)
    _print_plan(result, chosen, fmt, out, plot)
    if chosen is None:
        raise click.ClickException(
            f"no candidate reaches P(deadline) >= {result.target:.2f}"
            + (f" within budget {budget}" if budget else "") + "; relax --deadline, --risk or --budget")


def _print_plan(result, chosen, fmt, out, plot):
    if fmt == "json":
        click.echo(report.to_json({"chosen": chosen,
                                   "candidates": [report.candidate_record(r) for r in result.ranked],
                                   "skipped": [{"offering": o, "reason": why} for o, why in result.skipped],
                                   "stats": {"candidates": result.screened, "simulated": len(result.ranked),
                                             "trials": result.trials, "events": result.events,
                                             "wall_s": result.wall_s}}))
        return
    if fmt == "csv":
        click.echo(report.flat_csv([report.candidate_record(r) for r in result.ranked]))
        return
    w = result.workload
    click.echo(f"{w.name}: {w.samples:,} samples, global batch {w.global_batch}, deadline "
               f"{format_duration(result.deadline_s)}, P(deadline) >= {result.target:.2f}; "
               f"profile {result.profile.id} ({result.profile.source})")
    click.echo(report.table(report.PLAN_HEADERS, report.plan_rows(result), "table"))
    click.echo(f"{result.screened} candidates screened, {len(result.ranked)} simulated x {result.trials} trials "
               f"({result.events:,} events) in {result.wall_s:.1f}s. * chosen, x misses the target. "
               f"Prices read {_price_dates(result)}.")
    if chosen:
        click.echo(f"wrote {out}" + (f" and {plot}" if plot else ""))


def _price_dates(result) -> str:
    dates = sorted({r.configured.candidate.offering.read_date for r in result.ranked})
    return ", ".join(dates)


@cli.command("simulate")
@click.option("--workload", help="workload file or name (with --offering); or give the bare flags below")
@click.option("--offering", help="offering id from `costsim catalog` (with --workload)")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--variant", help="the profile's runner configuration for the GPU (with --workload; default: "
              "its main one)")
@click.option("--work-hours", type=POSITIVE, help="compute time of the whole job, in hours")
@click.option("--deadline", type=DURATION)
@click.option("--checkpoint-interval", type=DURATION, help="compute between checkpoints")
@click.option("--checkpoint-cost", type=DURATION, default="0s", help="time to write a checkpoint")
@click.option("--checkpoint-stall", type=DURATION, help="async checkpoints: the training stall")
@click.option("--restart-cost", type=DURATION, default="0s", help="restore time after a preemption")
@click.option("--changeover", type=DURATION, default="0s", help="billed time from start to progress")
@click.option("--notice", type=DURATION, default="0s", help="warning before a spot reclaim")
@click.option("--preemption-mtbf", type=DURATION, help="mean time between spot preemptions")
@click.option("--capacity-wait", type=DURATION, default="0s", help="mean wait for spot capacity after one")
@click.option("--weibull-shape", type=POSITIVE, default=1.0, show_default=True, help="1 = exponential")
@click.option("--trace", "traces", multiple=True, type=click.Path(),
              help="capacity trace JSON (or a folder of them), one trial each; more files may follow it")
@click.option("--policy", type=click.Choice(sorted(POLICIES)), default="spot-only", show_default=True)
@click.option("--on-demand-price", type=click.FloatRange(min=0), help="per instance-hour")
@click.option("--spot-price", type=click.FloatRange(min=0), help="per instance-hour")
@click.option("--trials", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--per-trial", is_flag=True, help="list every trial's cost and finish time")
@click.argument("more_traces", nargs=-1, type=click.Path())
@output_options
def simulate_command(workload, offering, nodes, variant, work_hours, deadline, checkpoint_interval, checkpoint_cost,
                     checkpoint_stall, restart_cost, changeover, notice, preemption_mtbf, capacity_wait,
                     weibull_shape, traces, policy, on_demand_price, spot_price, trials, seed, per_trial, more_traces,
                     fmt):
    """Simulate one configuration many times: what-if questions and checks of the model.

    Example: costsim simulate --work-hours 48 --deadline 52h --checkpoint-interval 1h --changeover 6m
    --policy uniform-progress --trace trace1.json trace2.json --spot-price 0.9 --on-demand-price 3.06
    """
    if more_traces and not traces:
        raise click.UsageError(f"unexpected argument {more_traces[0]!r}; trace files follow --trace")
    traces = _trace_files(list(traces) + list(more_traces))
    if variant and not workload:
        raise click.UsageError("--variant needs --workload (it names one of the workload profile's configurations)")
    if workload:
        if not offering:
            raise click.UsageError("--workload needs --offering (an id from `costsim catalog`)")
        spec = io.load_workload(workload)
        config = workload_config(spec, find_offering(offering, spec), nodes, policy, checkpoint_interval, deadline,
                                 variant)
    else:
        missing = [f for f, v in (("--work-hours", work_hours), ("--deadline", deadline),
                                  ("--checkpoint-interval", checkpoint_interval)) if v is None]
        if missing:
            raise click.UsageError(f"without --workload, give {', '.join(missing)}")
        job = BareJob(work_s=work_hours * 3600, deadline_s=deadline, checkpoint_interval_s=checkpoint_interval,
                      checkpoint_s=checkpoint_cost, checkpoint_stall_s=checkpoint_stall, restart_s=restart_cost,
                      changeover_s=changeover, notice_s=notice, on_demand_price=on_demand_price,
                      spot_price=spot_price, mtbf_s=preemption_mtbf, capacity_wait_s=capacity_wait,
                      weibull_shape=weibull_shape)
        config = bare_config(job, policy, list(traces))
    if traces:
        trials = len(traces)
    doc = summary(config, trials, seed, per_trial)
    if fmt == "json":
        click.echo(report.to_json(doc))
        return
    rows = [[k, *(_fmt(doc[k][q]) for q in ("mean", "p50", "p90"))] for k in ("makespan_h", "cost")]
    click.echo(report.table(["", "mean", "P50", "P90"], rows, fmt))
    if fmt == "table":
        click.echo(f"deadline met in {doc['deadline_met']:.3f} of {doc['trials']} trials; "
                   f"{doc['preemptions']:.2f} preemptions per trial; {doc['unfinished']} unfinished")


def _trace_files(paths: list[str]) -> list[str]:
    """Files as given; a folder stands for the *.json files in it, in name order."""
    files = []
    for path in paths:
        folder = Path(path)
        files += sorted(str(p) for p in folder.glob("*.json")) if folder.is_dir() else [path]
    return files


def _fmt(value) -> str:
    return "never" if value is None else f"{value:,.3f}"


@cli.command("compare")
@click.option("--scenario", help="scenario file or built-in name (seed-a100, h100-team, rtx4090-workstation)")
@click.option("--fleet", help="fleet (demand) file or built-in name, with --hardware and --horizon")
@click.option("--hardware", help="owned SKU from data/hardware/skus.yaml, e.g. hgx-h100-8")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, help="owned servers (with --hardware)")
@click.option("--horizon", type=DURATION, help="how long to simulate, e.g. 3y (with --fleet)")
@click.option("--utilization", help="utilisations to sweep, e.g. 0.1,0.3,0.5")
@click.option("--plot", type=click.Path(dir_okay=False), help="draw cost per used GPU-hour vs utilisation")
@output_options
def compare_command(scenario, fleet, hardware, nodes, horizon, utilization, plot, fmt):
    """Buy vs cloud: cost of each strategy for a team's demand, and break-even utilisation.

    Example: costsim compare --scenario h100-team --plot compare.png
    """
    from costsim.compare import compare
    from costsim.compare_report import as_json, plot as draw, render
    from costsim.io.scenario import load_scenario
    from costsim.whatif_fleet import scenario_for_hardware
    if bool(scenario) == bool(fleet):
        raise click.UsageError("give --scenario, or --fleet with --hardware and --horizon")
    if fleet and not (hardware and horizon):
        raise click.UsageError("--fleet needs --hardware SKU and --horizon (e.g. 3y)")
    spec = load_scenario(scenario) if scenario else scenario_for_hardware(fleet, hardware, nodes, horizon)
    comparison = compare(spec, _fractions(utilization))
    if plot:
        draw(comparison, plot)
    click.echo(report.to_json(as_json(comparison)) if fmt == "json" else render(comparison, fmt))


def _fractions(text: str | None) -> tuple[float, ...]:
    if not text:
        return ()
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected fractions like 0.1,0.3,0.5", param_hint="--utilization")
    if not all(0 < v <= 1 for v in values):
        raise click.BadParameter(f"{text!r}: each must be in (0, 1]", param_hint="--utilization")
    return values


@cli.command("calibrate")
@click.argument("runs", nargs=-1, required=True)
@click.option("--profile", "profile_ref", help="profile to start from (default: the one the first run's plan used)")
@click.option("--out", type=click.Path(dir_okay=False), help="where to write the calibrated profile "
              "(default: <profile>.calibrated.yaml beside the runs' first folder)")
@output_options
def calibrate_command(runs, profile_ref, out, fmt):
    """Refit throughput, checkpoint and restart figures from runs; report the prediction errors.

    Example: costsim calibrate runs/a runs/b --out data/profiles/tiny-measured.yaml
    """
    from costsim.calibrate import calibrate, load_run, plan_profile, report_rows, updated_profile_document
    loaded = [load_run(ref) for ref in runs]
    profile = io.load_profile(profile_ref) if profile_ref else plan_profile(loaded[0])
    result = calibrate(loaded, profile)
    target = out or str(loaded[0].path / f"{Path(profile.path).stem}.calibrated.yaml")
    import yaml
    io.write_atomic(target, yaml.safe_dump(updated_profile_document(profile.path, result), sort_keys=False))
    rows = report_rows(result)
    if fmt == "json":
        click.echo(report.to_json({"profile": target, "gpu": result.gpu, "fitted": list(result.step_fit.fitted),
                                   "pinned": result.step_fit.pinned, "notes": result.notes, "runs": rows}))
        return
    click.echo(report.table(["run", "figure", "plan predicted", "refit", "measured", "plan error", "refit error"],
                            _calibration_rows(rows), fmt))
    if fmt == "table":
        for note in result.notes:
            click.echo(f"note: {note}")
        click.echo(f"wrote {target}")


def _calibration_rows(rows):
    from costsim.calibrate import relative_error
    out = []
    for row in rows:
        for figure in ("step_s", "samples_per_s", "wall_s", "checkpoint_stall_s", "restart_s"):
            values = row[figure]
            cells = [values.get("plan"), values.get("refit"), values.get("measured")]
            errors = [relative_error(values.get("plan"), values.get("measured")),
                      relative_error(values.get("refit"), values.get("measured"))]
            out.append([row["run"], figure, *(_num(v) for v in cells), *(_pct(e) for e in errors)])
    return out


def _num(value) -> str:
    return "-" if value is None else f"{value:,.4g}"


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:+.1f}%"


@cli.command("export")
@click.argument("plan", type=click.Path(dir_okay=False))
@click.option("--to", "target", type=click.Choice(["skypilot", "slurm"]), required=True)
@click.option("--out", type=click.Path(dir_okay=False), help="write here instead of stdout")
@click.option("--bucket", help="SkyPilot: an existing bucket for checkpoints, e.g. s3://my-ckpts (default: a new one)")
@click.option("--shared-dir", default="$HOME/costsim-runs", show_default=True,
              help="Slurm: a folder every node sees, for run folders and checkpoints")
def export_command(plan, target, out, bucket, shared_dir):
    """Export a plan as a SkyPilot task YAML or a Slurm batch script that runs `runner execute`.

    Example: costsim export plan.json --to slurm --out job.sbatch
    """
    from costsim.export import skypilot_task, slurm_script
    from costsim.planfile import read_plan
    doc = read_plan(plan)
    text = (skypilot_task(doc, plan_file=Path(plan).name, bucket=bucket) if target == "skypilot"
            else slurm_script(doc, plan_file=Path(plan).name, shared_dir=shared_dir))
    if out:
        io.write_atomic(out, text)
        click.echo(f"wrote {out}", err=True)
    else:
        click.echo(text, nl=False)


@cli.command("catalog")
@click.option("--gpu", help="only this GPU type, e.g. H100")
@output_options
def catalog_command(gpu, fmt):
    """List cloud offerings with their dated prices (USD per instance-hour).

    Example: costsim catalog --gpu H100
    """
    offerings = io.load_offerings()
    if gpu:
        known = sorted({o.gpu for o in offerings})
        if gpu not in known:
            raise InputError("--gpu", "gpu", f"unknown {gpu!r}; allowed: {', '.join(known)}")
        offerings = [o for o in offerings if o.gpu == gpu]
    records = [{"offering": o.id, "gpu": o.gpu, "gpus_per_node": o.gpus_per_node, "on_demand_per_h": o.on_demand_per_h,
                "spot_per_h": o.spot_per_h, "spot_notice_s": o.spot_notice_s,
                "spot_model": o.spot_model.name if o.spot_model else None, "provision_s": o.provision_s,
                "currency": o.currency, "read_date": o.read_date, "source": o.source} for o in offerings]
    if fmt == "json":
        click.echo(report.to_json(records))
        return
    headers = ["offering", "gpu", "gpus_per_node", "on_demand_per_h", "spot_per_h", "spot_notice_s", "read_date"]
    rows = [[r[h] if r[h] is not None else "-" for h in headers] for r in records]
    click.echo(report.table(headers, rows, fmt))


def main(argv: list[str] | None = None) -> None:
    """Entry point (see costsim.entry for the error contract)."""
    run(cli, "costsim", argv)
