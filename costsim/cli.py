"""The costsim command line: each command parses its flags and makes one library call."""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

import click

from costsim import io, report
from costsim.catalog import (
    MARKET_MODES,
    SENSITIVITY_ENDS,
    find_offering,
    gpu_names,
    offerings_for,
    with_market,
    with_spot_models,
)
from costsim.cliparams import DURATION, DURATION_OR_ZERO, OUTPUT, OUTPUT_FOLDER, PLOT, POSITIVE, SEED
from costsim.contract.telemetry import TELEMETRY
from costsim.entry import run
from costsim.errors import InputError, ModelError
from costsim.io.catalog import load_catalog
from costsim.io.files import outside_shipped_data
from costsim.planfile import plan_of, spot_model_name
from costsim.planner import PlanOptions, plan
from costsim.policies import POLICIES
from costsim.units import format_duration, format_probability
from costsim.whatif import BareJob, bare_config, load_traces, summary, workload_config

FORMATS = ["table", "json", "csv"]


def output_options(command):
    """The shared --format option (JSON goes to stdout; progress and notes to stderr)."""
    return click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
                        help="table for people, json or csv for programs")(command)


def catalog_option(command):
    """--catalog: prices from an overlay made by `costsim catalog --import` instead of the shipped catalog."""
    return click.option("--catalog", "catalog_ref", type=click.Path(), help="a price catalog overlay made by "
                        "`costsim catalog --import` (default: the shipped catalog)")(command)


def market_options(command):
    command = click.option("--market-trace", "market_traces", multiple=True, type=click.Path(),
                           help="your capacity traces (a file, a bundle FILE.json.gz, or a folder: one group each "
                           "file; 1-node 0/1 traces or multi-node count traces) as more groups of the ensemble (or "
                           "the only ones, with --market traces)")(command)
    command = click.option("--home-weight", type=click.FloatRange(0, min_open=True), help="how many times more "
                           "a capacity group measured in the job's own region (the offering's; in validate, the held-out "
                           "group's) weighs than one from elsewhere (default 3, docs/model.md \"The job's region\"; 1: "
                           "every group the same)")(command)
    return click.option("--market", type=click.Choice(MARKET_MODES),
                        help="where trials draw spot capacity from: ensemble (default: real windows of every "
                        "shipped capacity group and each group's fit, docs/model.md), traces (only --market-trace's), "
                        "fit (one fitted renewal model; the default with --spot-model)")(command)


@dataclass(frozen=True)
class RecentFlags:
    """The --recent-* flags as given (None: not given)."""

    trace: str | None = None
    share: float | None = None
    past: float | None = None
    bandwidth: float | None = None
    state: str | None = None
    state_age: float | None = None

    def given(self) -> list[str]:
        return [f"--recent-{f.name.replace('_', '-')}" for f in fields(self) if getattr(self, f.name) is not None]


def recent_options(command):
    """The job's recent capacity (costsim.ensemble.Recent): the ensemble's replays weighed by their past. The
    command gets them as one `recent` argument (RecentFlags)."""
    names = [f.name for f in fields(RecentFlags)]

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, recent=RecentFlags(**{n: kwargs.pop(f"recent_{n}") for n in names}), **kwargs)

    options = [
        click.option("--recent-trace", type=click.Path(dir_okay=False), help="a capacity trace of the job's own "
                     "market up to now (spot-traces' format, as --market-trace): the share of its last --recent-past "
                     "with capacity, and whether it has capacity now and since when, weigh each replayed window by "
                     "how like it its own past was (docs/model.md)"),
        click.option("--recent-share", type=click.FloatRange(0, 1), help="the same as a number: the share of the "
                     "last --recent-past in which the job's market had capacity, e.g. 0.4"),
        click.option("--recent-state", type=click.Choice(["up", "down"]), help="with --recent-share: whether the "
                     "job's market has capacity now (a trace says so itself)"),
        click.option("--recent-state-age", type=DURATION, help="with --recent-state: for how long it has been so, "
                     "e.g. 5h (longer than --recent-past counts as that long; not given: the state alone is compared)"),
        click.option("--recent-past", type=DURATION, help="how far back the recent capacity looks (default 72h)"),
        click.option("--recent-bandwidth", type=click.FloatRange(0, 1, min_open=True),
                     help="how alike two pasts' shares count (the kernel's width; default 0.1)"),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def _with_recent(offerings, flags: RecentFlags):
    """The offerings' ensembles told the job's recent capacity (--recent-trace or --recent-share)."""
    from costsim import ensemble
    if flags.trace and flags.share is not None:
        raise click.UsageError("--recent-trace and --recent-share say the same thing: give one")
    if flags.state_age is not None and flags.state is None:
        raise click.UsageError("--recent-state-age says how long --recent-state has held: give --recent-state too")
    if flags.state is not None and flags.share is None:
        raise click.UsageError("--recent-state goes with --recent-share" + (
            " (a --recent-trace says its state itself)" if flags.trace else ""))
    if not flags.trace and flags.share is None:
        if flags.past is not None or flags.bandwidth is not None:
            raise click.UsageError("--recent-past and --recent-bandwidth go with --recent-trace or --recent-share")
        return offerings
    past = ensemble.DEFAULT_RECENT_PAST_S if flags.past is None else flags.past
    bandwidth = ensemble.DEFAULT_RECENT_BANDWIDTH if flags.bandwidth is None else flags.bandwidth
    if flags.trace:
        recent = ensemble.recent_from_trace(flags.trace, past, bandwidth)
    else:
        assert flags.share is not None
        if (flags.state, flags.share) in (("down", 1.0), ("up", 0.0)):
            raise click.UsageError(f"--recent-state {flags.state} with --recent-share {flags.share:g}: a market "
                                   f"with capacity {'all' if flags.share else 'none'} of the past is "
                                   f"{'up' if flags.share else 'down'} now")
        state = None if flags.state is None else ensemble.State(
            up=flags.state == "up", age_s=None if flags.state_age is None else min(flags.state_age, past))
        recent = ensemble.Recent(share=flags.share, past_s=past, bandwidth=bandwidth, source="--recent-share", state=state)
    if not any(o.spot_model is not None and o.spot_model.market is not None for o in offerings):
        raise click.UsageError("--recent-trace/--recent-share weigh the ensemble's replays: no spot offering here "
                               "draws from an ensemble (--market fit, --spot-model, or no spot market)")
    return [replace(o, spot_model=replace(o.spot_model, market=ensemble.with_recent(o.spot_model.market, recent)))
            if o.spot_model is not None and o.spot_model.market is not None else o for o in offerings]


def _home_weight(weight: float | None, mode: str) -> float:
    """--home-weight as given, else the default; refused where no ensemble weighs groups (--market fit)."""
    from costsim.ensemble import DEFAULT_HOME_WEIGHT
    if weight is not None and mode == "fit":
        raise click.UsageError("--home-weight weighs the ensemble's capacity groups; --market fit (or --spot-model) "
                               "draws from one fitted model")
    return DEFAULT_HOME_WEIGHT if weight is None else weight


def _market_mode(market: str | None, traces, spot_model) -> str:
    """--market as given, else fit with --spot-model (its fit replaces the ensemble), else ensemble."""
    if spot_model and market not in (None, "fit"):
        raise click.UsageError(f"--spot-model replaces the market with its fit; --market {market} cannot go with it")
    if spot_model and traces:
        raise click.UsageError("--spot-model replaces the market with its fit; --market-trace cannot go with it")
    return market or ("fit" if spot_model else "ensemble")


def wide_option(command):
    """--wide: every column, headers spelled out (the default table fits 120 columns)."""
    return click.option("--wide", is_flag=True, help="every column, wider than 120 characters")(command)


def progress_line(label: str, every_s: float = 1.0, what: str = "configurations simulated"):
    """Progress on stderr: at most one line a second, and always the last."""
    last = [0.0]

    def report_progress(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] >= every_s:
            last[0] = now
            click.echo(f"{label}: {done}/{total} {what}", err=True)
    return report_progress


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="costsim")
def cli():
    """Plan, cost and calibrate GPU training jobs across spot, on-demand and owned hardware.

    Example: costsim plan --workload sdxl --plot plan.png
    """


def planning_options(command):
    """What `plan` and `validate` both plan with: the workload, its deadline and risk, the candidates
    (--gpu, --policy, --nodes), and the Monte Carlo trials and seed."""
    options = [
        click.option("--workload", required=True, help="workload YAML file or built-in name (sdxl, tiny)"),
        click.option("--deadline", type=DURATION, help="override the workload's deadline, e.g. 36h"),
        click.option("--risk", type=click.FloatRange(0, 1, max_open=True), help="acceptable probability of "
                     "missing the deadline (default: 1 - the workload's p_deadline)"),
        click.option("--trials", type=click.IntRange(min=10), default=400, show_default=True,
                     help="Monte Carlo trials per simulated candidate"),
        click.option("--seed", type=SEED, default=0, show_default=True),
        click.option("--gpu", "gpus", multiple=True, help="only these GPU types (repeatable)"),
        click.option("--policy", "policies_", multiple=True, type=click.Choice(sorted(POLICIES)),
                     help="only these recovery policies (repeatable; default: every one the offering's markets "
                     "allow), e.g. spot-only"),
        click.option("--nodes", "nodes", multiple=True, type=click.IntRange(min=1),
                     help="only these node counts (repeatable; default: 1, 2, 4 ... up to the workload's "
                     "max_nodes), e.g. 2 for a gang of two"),
        click.option("--jobs", type=click.IntRange(min=1), help="worker processes (default: CPU count)"),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@cli.command("plan")
@planning_options
@click.option("--budget", type=POSITIVE, help="largest acceptable P90 cost")
@click.option("--profile", "profile_ref", help="throughput profile file to use instead of the workload's")
@click.option("--shortlist", type=click.IntRange(min=1), default=16, show_default=True,
              help="candidates kept by the analytic screen for Monte Carlo")
@click.option("--no-screen", "no_screen", is_flag=True, help="simulate every feasible configuration, not only the "
              "screen's shortlist and the safe alternatives (slower; the screen keeps the choice, every plan cheaper "
              "than the cheapest certain one, and the safe alternatives: docs/model.md)")
@click.option("--out", default="plan.json", show_default=True, type=OUTPUT,
              help="where to write the chosen plan")
@click.option("--plot", type=PLOT, help="draw cost vs P90 finish to this PNG")
@click.option("--spot-model", "spot_model", type=click.Path(dir_okay=False), help="spot capacity models fitted by "
              "`costsim calibrate --market --out` (keyed by offering id or catalog model name); the plan is also "
              "made at the ends of their 95% intervals, to say whether the choice holds (replaces the ensemble: "
              "--market fit)")
@market_options
@recent_options
@catalog_option
@output_options
@wide_option
def plan_command(workload, deadline, budget, risk, trials, seed, profile_ref, gpus, policies_, nodes, shortlist,
                 no_screen, jobs, out, plot, spot_model, market, market_traces, home_weight, recent,
                 catalog_ref, fmt, wide):
    """Rank ways to run a training job by cost and deadline risk; write the best as plan.json.

    Example: costsim plan --workload data/workloads/sdxl.yaml --trials 400 --plot plan.png
    """
    spec = io.load_workload(workload)
    profile = io.load_profile_for(spec.model, profile_ref or spec.profile)
    options = PlanOptions(trials=trials, seed=seed, risk=risk, deadline_s=deadline, budget=budget,
                          shortlist=shortlist, screen=not no_screen, jobs=jobs, policies=tuple(policies_) or None,
                          nodes=tuple(nodes) or None)
    market = _market_mode(market, market_traces, spot_model)
    catalog = with_market(offerings_for(spec, tuple(gpus) or None, load_catalog(catalog_ref)), market,
                          tuple(market_traces), _home_weight(home_weight, market))
    catalog = _with_recent(catalog, recent)
    fitted = io.load_fitted_spot_models(spot_model) if spot_model else None
    offerings = with_spot_models(catalog, fitted) if fitted else catalog
    result = plan(spec, profile, offerings, options, progress=progress_line("plan"))
    chosen = plan_of(result, result.chosen) if result.chosen else None
    sensitivity = None
    if fitted:
        sensitivity = sensitivity_record(result, {
            end: plan(spec, profile, with_spot_models(catalog, fitted, end), options,
                      progress=progress_line(f"plan at the {end} end")) for end in SENSITIVITY_ENDS})
        if chosen:
            chosen = replace(chosen, sensitivity=sensitivity)
    if chosen:
        chosen.write(out)
    if plot:
        report.plot_plan(result, plot)
    _print_plan(result, chosen, fmt, out, plot, wide)
    if sensitivity and fmt == "table":
        _print_sensitivity(_choice(result), sensitivity)
    if chosen is None:
        raise ModelError(
            f"no candidate reaches P(deadline) >= {format_probability(result.target)}"
            + (f" within budget {budget}" if budget else "") + "; relax --deadline, --risk or --budget")


def _print_plan(result, chosen, fmt, out, plot, wide=False):
    if fmt == "json":
        click.echo(report.to_json({"chosen": chosen.to_dict() if chosen else None,
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
               f"{format_duration(result.deadline_s)}, P(deadline) >= {format_probability(result.target)}")
    click.echo(f"profile {result.profile.id} ({result.profile.source})")
    headers, rows, legend = report.plan_table(result, wide)
    click.echo(report.table(headers, rows, "table"))
    click.echo(report.wrap(legend))
    for note in (report.home_note(result), report.recent_note(result), report.spot_note(result)):
        if note:
            click.echo(report.wrap(note))
    click.echo(report.wrap(f"{result.screened} candidates screened, {len(result.ranked)} simulated x {result.trials} "
                           f"trials ({result.events:,} events) in {result.wall_s:.1f}s. Prices: "
                           f"{_price_dates(result)}."))
    if chosen:
        click.echo(f"wrote {out}" + (f" and {plot}" if plot else ""))


# what a user would run differently; the checkpoint interval follows the MTBF (Daly) and is shown, not compared
CHOICE_KEYS = ("offering", "nodes", "policy", "variant")


def _choice(result) -> dict | None:
    """What a plan chose, in the terms that would change what a user runs."""
    if result.chosen is None:
        return None
    c = result.chosen.configured.candidate
    return {"offering": c.offering.id, "nodes": c.nodes, "policy": c.policy, "variant": c.variant or None,
            "checkpoint_interval_s": c.checkpoint_interval_s, "spot_model": spot_model_name(c.offering, c.policy),
            "cost_mean": result.chosen.stats.cost_mean, "p_deadline": result.chosen.stats.p_deadline}


def sensitivity_record(result, sensitivity: dict) -> dict:
    """plan.json `sensitivity`: the choice at each end of the fitted spot models' intervals, and
    whether it differs from the plan's (offering, nodes, policy or runner configuration)."""
    base = _choice(result)
    ends = {end: _choice(other) for end, other in sensitivity.items()}
    changes = any(c is None or base is None or any(c[k] != base[k] for k in CHOICE_KEYS) for c in ends.values())
    return {**ends, "choice_changes": changes}


def _print_sensitivity(base: dict | None, sensitivity: dict) -> None:
    if base is not None:
        click.echo(f"spot model of the chosen plan: {base['spot_model'] or 'none (no spot market)'}")
    for end in SENSITIVITY_ENDS:
        c = sensitivity[end]
        if c is None:
            click.echo(f"spot model at its {end} end: no candidate meets the target")
            continue
        same = base is not None and all(c[k] == base[k] for k in CHOICE_KEYS)
        chose = (f"chooses {c['offering']} x{c['nodes']} {c['policy']}" + (f" [{c['variant']}]" if c["variant"] else "")
                 + f" ckpt {format_duration(c['checkpoint_interval_s'])}")
        click.echo(f"spot model at its {end} end ({c['spot_model'] or 'no spot'}): "
                   f"{'the same choice' if same else chose}, mean cost {c['cost_mean']:,.2f}, "
                   f"P(deadline) {c['p_deadline']:.3f}")
    if sensitivity["choice_changes"]:
        click.echo("note: the choice changes within the fitted spot model's 95% intervals: the data do not settle "
                   "it (more lives narrow the intervals)")
    else:
        click.echo("the choice holds at both ends of the fitted spot model's 95% intervals")


def _price_dates(result) -> str:
    """Which catalog the prices come from and when each was read."""
    read: dict[str, set[str]] = {}
    for r in result.ranked:
        o = r.configured.candidate.offering
        read.setdefault("owned servers' TCO" if o.owned_per_h is not None else f"{o.catalog} catalog", set()).add(
            o.read_date)
    return "; ".join(f"{name}, read {', '.join(sorted(dates))}" for name, dates in sorted(read.items()))


@cli.command("simulate")
@click.option("--plan", "plan_file", type=click.Path(dir_okay=False), help="replay a plan.json's chosen configuration "
              "exactly (its figures, policy, interval, deadline, nodes, dated prices) on its market model, or on "
              "--trace files; its trials and seed unless given")
@click.option("--workload", help="workload file or name (with --offering); or give the bare flags below")
@click.option("--offering", help="offering id from `costsim catalog` (with --workload)")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--variant", help="the profile's runner configuration for the GPU (with --workload; default: "
              "its main one)")
@click.option("--work-hours", type=POSITIVE, help="compute time of the whole job, in hours")
@click.option("--deadline", type=DURATION)
@click.option("--checkpoint-interval", type=DURATION, help="compute between checkpoints")
@click.option("--checkpoint-cost", type=DURATION_OR_ZERO, default="0s", help="time to write a checkpoint")
@click.option("--checkpoint-stall", type=DURATION, help="async checkpoints: the training stall")
@click.option("--restart-cost", type=DURATION_OR_ZERO, default="0s", help="restore time after a preemption")
@click.option("--changeover", type=DURATION_OR_ZERO, default="0s", help="billed time from start to progress")
@click.option("--notice", type=DURATION_OR_ZERO, default="0s", help="warning before a spot reclaim")
@click.option("--preemption-mtbf", type=DURATION, help="mean time between spot preemptions")
@click.option("--capacity-wait", type=DURATION_OR_ZERO, default="0s", help="mean wait for spot capacity after one")
@click.option("--weibull-shape", type=POSITIVE, default=1.0, show_default=True, help="1 = exponential")
@click.option("--trace", "traces", multiple=True, type=click.Path(),
              help="capacity trace JSON (a folder of them, or a bundle FILE.json.gz of windows, FILE.json.gz#N for "
              "one), one trial each; more files may follow it. A multi-node count trace is read as the gang meets it "
              "(--nodes, or the plan's nodes)")
@click.option("--policy", type=click.Choice(sorted(POLICIES)), default="spot-only", show_default=True)
@click.option("--on-demand-price", type=click.FloatRange(min=0), help="per instance-hour")
@click.option("--spot-price", type=click.FloatRange(min=0), help="per instance-hour")
@click.option("--owned-price", type=click.FloatRange(min=0), help="policy owned: the server's cost of ownership per "
              "hour (its TCO share: `costsim catalog` prices the shipped servers)")
@click.option("--trials", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--per-trial", is_flag=True, help="list every trial: cost, finish, preemptions and when it first went "
              "on-demand (a fallback policy's switch)")
@click.option("--spot-model", "spot_model", type=click.Path(dir_okay=False), help="a fitted spot model file "
              "(`costsim calibrate --market --out`): with --workload its entry for the offering, else its one model "
              "in place of --preemption-mtbf/--capacity-wait/--weibull-shape")
@click.option("--plot", type=PLOT, help="draw the trials' finish times and costs (their distributions, the "
              "deadline marked) to this PNG")
@click.argument("more_traces", nargs=-1, type=click.Path())
@market_options
@recent_options
@catalog_option
@output_options
def simulate_command(plan_file, workload, offering, nodes, variant, work_hours, deadline, checkpoint_interval,
                     checkpoint_cost,
                     checkpoint_stall, restart_cost, changeover, notice, preemption_mtbf, capacity_wait,
                     weibull_shape, traces, policy, on_demand_price, spot_price, owned_price, trials, seed, per_trial,
                     spot_model, plot,
                     more_traces, market, market_traces, home_weight, recent, catalog_ref, fmt):
    """Simulate one configuration many times: what-if questions and checks of the model.

    Example: costsim simulate --work-hours 48 --deadline 52h --checkpoint-interval 1h --changeover 6m
    --policy uniform-progress --trace data/traces/cbl-us-west-2a-v100 --spot-price 0.9 --on-demand-price 3.06
    """
    if more_traces and not traces:
        raise click.UsageError(f"unexpected argument {more_traces[0]!r}; trace files follow --trace")
    traces = _trace_files(list(traces) + list(more_traces))
    source = click.get_current_context().get_parameter_source
    told = recent.given()
    if told and (plan_file or not workload):
        raise click.UsageError(f"{told[0]} tells --workload/--offering's ensemble the recent capacity; "
                               + ("a plan replays the recent capacity it was made with" if plan_file else
                                  "bare flags have no ensemble"))
    if told and traces:
        raise click.UsageError(f"--trace replays those traces one per trial; {told[0]} weighs the ensemble's replays "
                               "instead: give one or the other")
    if variant and not workload:
        raise click.UsageError("--variant needs --workload (it names one of the workload profile's configurations)")
    if plan_file:
        clashing = [f"--{name.replace('_', '-')}" for name in (
            "workload", "offering", "variant", "work_hours", "deadline", "checkpoint_interval", "checkpoint_cost",
            "checkpoint_stall", "restart_cost", "changeover", "notice", "preemption_mtbf", "capacity_wait",
            "weibull_shape", "policy", "on_demand_price", "spot_price", "owned_price", "nodes", "spot_model",
            "market", "market_traces", "home_weight")
            if source(name) not in (None, click.core.ParameterSource.DEFAULT)]
        if clashing:
            raise click.UsageError(f"--plan replays the plan as chosen: {', '.join(clashing)} cannot change it "
                                   "(use --workload/--offering or the bare flags for a what-if; --trace for real capacity)")
        from costsim.whatif import plan_config
        config, planned, notes = plan_config(plan_file)
        currency = planned.get("currency")
        for note in notes:
            click.echo(f"note: {note}; replaying the plan's figure", err=True)
        if traces:
            config = replace(config, traces=load_traces(list(traces), config.nodes))
        elif planned["trials"]:   # the plan's own draws: the same trials give the plan's figures
            if source("trials") == click.core.ParameterSource.DEFAULT:
                trials = planned["trials"]
            if source("seed") == click.core.ParameterSource.DEFAULT and planned["seed"] is not None:
                seed = planned["seed"]
    elif workload:
        if not offering:
            raise click.UsageError("--workload needs --offering (an id from `costsim catalog`)")
        spec = io.load_workload(workload)
        chosen = find_offering(offering, spec, load_catalog(catalog_ref))
        if traces and (market or market_traces or home_weight is not None):
            raise click.UsageError("--trace replays those traces one per trial; --market/--market-trace/--home-weight "
                                   "choose what the trials draw from otherwise: give one or the other")
        mode = _market_mode(market, market_traces, spot_model)
        chosen = with_market([chosen], mode, tuple(market_traces), _home_weight(home_weight, mode))[0]
        chosen = _with_recent([chosen], recent)[0]
        if spot_model:
            chosen = with_spot_models([chosen], io.load_fitted_spot_models(spot_model))[0]
        config = workload_config(spec, chosen, nodes, policy, checkpoint_interval, deadline, variant)
        currency = chosen.currency
        if traces:   # the traces' capacity in place of the offering's spot model (they were ignored)
            config = replace(config, traces=load_traces(list(traces), nodes))
    else:
        if market or market_traces or home_weight is not None:
            raise click.UsageError("--market, --market-trace and --home-weight go with --workload/--offering (bare "
                                   "flags give --preemption-mtbf or --trace)")
        missing = [f for f, v in (("--work-hours", work_hours), ("--deadline", deadline),
                                  ("--checkpoint-interval", checkpoint_interval)) if v is None]
        if missing:
            raise click.UsageError(f"without --workload, give {', '.join(missing)}")
        if spot_model:
            if preemption_mtbf is not None:
                raise click.UsageError("give --spot-model or --preemption-mtbf, not both")
            models = io.load_fitted_spot_models(spot_model)
            if len(models) != 1:
                raise InputError(spot_model, "models", f"{len(models)} models ({', '.join(sorted(models))}); without "
                                 "--workload/--offering the file must hold one")
            model = next(iter(models.values()))
            if model.mtbf_s is None:
                raise InputError(spot_model, f"models.{model.key}.mtbf", "missing")
            preemption_mtbf = model.mtbf_s
            capacity_wait = model.wait_mean_s if model.wait_mean_s is not None else capacity_wait
            weibull_shape = model.weibull_shape or weibull_shape
        job = BareJob(work_s=work_hours * 3600, deadline_s=deadline, checkpoint_interval_s=checkpoint_interval,
                      checkpoint_s=checkpoint_cost, checkpoint_stall_s=checkpoint_stall, restart_s=restart_cost,
                      changeover_s=changeover, notice_s=notice, on_demand_price=on_demand_price,
                      spot_price=spot_price, owned_price=owned_price, mtbf_s=preemption_mtbf, capacity_wait_s=capacity_wait,
                      weibull_shape=weibull_shape)
        config = bare_config(job, policy, list(traces))
        currency = None   # the prices given: in whatever money they were
    if traces:
        given = click.get_current_context().get_parameter_source("trials") != click.core.ParameterSource.DEFAULT
        if given and trials != len(traces):
            click.echo(f"note: {len(traces)} trace files set the trials: one each (--trials {trials} not used)", err=True)
        trials = len(traces)
    doc = summary(config, trials, seed, per_trial or bool(plot))
    if currency:
        doc["currency"] = currency
    if plot:
        report.plot_trials(doc, _trials_title(plan_file, workload, offering, policy, traces, doc["trials"]), plot)
        if not per_trial:
            del doc["per_trial"]
    if fmt == "json":
        click.echo(report.to_json(doc))
        return
    if per_trial:
        _print_trials(doc["per_trial"], traces, fmt)
        if fmt == "csv":
            return
    rows = [[label, *(_fmt(doc[k][q]) for q in ("mean", "p10", "p50", "p90"))]
            for k, label in (("makespan_h", "finish (h)"), ("cost", f"cost ({currency})" if currency else "cost"))]
    click.echo(report.table(["", "mean", "P10", "P50", "P90"], rows, fmt))
    if fmt == "table":
        met = round(doc["deadline_met"] * doc["trials"])
        click.echo(f"deadline met in {met} of {doc['trials']} trials ({100 * doc['deadline_met']:.1f}%)"
                   + (", one per trace file" if traces else "") + "; "
                   f"{doc['preemptions']:.2f} preemptions per trial; {doc['unfinished']} unfinished"
                   + (f"; {doc['past_trace_end']} ran past their trace's end, where the replay assumes no spot"
                      if doc.get("past_trace_end") else ""))


def _trials_title(plan_file, workload, offering, policy, traces, trials) -> str:
    """What the simulate plot shows: the plan, the workload on its offering, or the bare job; traces or a model."""
    what = (f"plan {Path(plan_file).name}" if plan_file else f"{workload} on {offering}, {policy}" if workload
            else f"bare job, {policy}")
    return f"{what}: {trials} trials" + (" (one per trace file)" if traces else "")


def _print_trials(trials: list[dict], traces: list[str], fmt: str) -> None:
    """One row a trial (its trace file, when trials replay traces); then when on-demand usually began."""
    hours = lambda h: "never" if h is None else f"{h:.2f}"  # noqa: E731
    rows = [[i if not traces else Path(traces[i % len(traces)]).name, hours(t["makespan_h"]), f"{t['cost']:,.2f}",
             "yes" if t["met_deadline"] else "no", t["preemptions"], hours(t["on_demand_from_h"])]
            for i, t in enumerate(trials)]
    click.echo(report.table(["trial", "finish h", "cost", "met", "preemptions", "on-demand from h"], rows, fmt))
    if fmt == "table":
        switched = sorted(t["on_demand_from_h"] for t in trials if t["on_demand_from_h"] is not None)
        if switched:
            quartiles = [switched[int(q * (len(switched) - 1))] for q in (0.25, 0.5, 0.75)]
            click.echo(f"on-demand in {len(switched)} of {len(trials)} trials, from {quartiles[1]:.2f} h at the median "
                       f"(quartiles {quartiles[0]:.2f}-{quartiles[2]:.2f} h)")
        else:
            click.echo(f"on-demand in none of {len(trials)} trials")
        click.echo()


def _trace_files(paths: list[str]) -> list[str]:
    """Traces as given; a folder stands for the *.json files in it, in name order, and a bundle
    (FILE.json.gz) for each of its windows (FILE.json.gz#N)."""
    from costsim.io.specs import trace_bundle_size, traces_in
    files = []
    for path in paths:
        if Path(path).is_dir():
            files += [str(p) for p in traces_in(path)]
        elif (size := trace_bundle_size(path)) is not None:
            files += [f"{path}#{i}" for i in range(size)]
        else:
            files.append(path)
    return files


def _fmt(value) -> str:
    return "never" if value is None else f"{value:,.3f}"


@cli.command("compare")
@click.option("--scenario", help="scenario file or built-in name (seed-a100, h100-team, rtx4090-workstation)")
@click.option("--fleet", help="fleet (demand) file or built-in name, with --hardware and --horizon")
@click.option("--history", type=click.Path(dir_okay=False), help="the team's real demand: `sacct -a -P` output or a "
              "CSV (docs/compare.md); with --hardware, or with --scenario in place of its fleet")
@click.option("--history-format", type=click.Choice(["sacct", "csv"]), help="default: sacct when the header has '|'")
@click.option("--timezone", default="UTC", show_default=True, help="the history's time zone where its times have no "
              "offset (Slurm prints local time), e.g. Europe/Berlin")
@click.option("--skip-bad", is_flag=True, help="skip history rows that do not parse (counted) instead of stopping")
@click.option("--resample", type=click.IntRange(min=0), default=20, show_default=True, help="with --history: "
              "histories made of its weeks drawn with replacement, for a 90% band (0: none)")
@click.option("--hardware", help="owned SKU from data/hardware/skus.yaml, e.g. hgx-h100-8")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, help="owned servers (with --hardware)")
@click.option("--horizon", type=DURATION, help="how long to simulate, e.g. 3y (needed with --fleet; with --scenario "
              "it replaces the scenario's own; a history covers what it covers)")
@click.option("--utilization", help="utilisations to sweep, e.g. 0.1,0.3,0.5")
@click.option("--plot", type=PLOT, help="draw cost per used GPU-hour vs utilisation (with "
              "--history: weekly demand against capacity and cumulative cost)")
@catalog_option
@output_options
def compare_command(scenario, fleet, history, history_format, timezone, skip_bad, resample, hardware, nodes, horizon,
                    utilization, plot, catalog_ref, fmt):
    """Buy vs cloud: cost of each strategy for a team's demand, and break-even utilisation.

    Example: costsim compare --scenario h100-team --plot compare.png

    From the team's Slurm accounting: costsim compare --history data/history/example-sacct.txt --hardware hgx-h100-8
    """
    from costsim.compare import compare, resampled_band
    from costsim.compare_report import as_json, render
    from costsim.compare_report import plot as draw
    from costsim.io.scenario import load_scenario, with_horizon
    if sum(map(bool, (scenario and not history, fleet, history))) != 1:
        raise click.UsageError("give --scenario, --fleet (with --hardware and --horizon), or --history (with "
                               "--hardware or --scenario)")
    loaded, prices = None, load_catalog(catalog_ref)
    if history:
        spec, loaded = _history_scenario(history, history_format, timezone, skip_bad, scenario, hardware, nodes,
                                         prices)
    elif fleet:
        from costsim.whatif_fleet import scenario_for_hardware
        if not (hardware and horizon):
            raise click.UsageError("--fleet needs --hardware SKU and --horizon (e.g. 3y)")
        spec = scenario_for_hardware(fleet, hardware, nodes, horizon, catalog=prices)
    else:
        spec = load_scenario(scenario, prices)
    if horizon and not fleet:
        spec = with_horizon(spec, horizon)
    comparison = compare(spec, _fractions(utilization))
    band = None
    if loaded is not None and resample:
        band = resampled_band(spec, resample, progress=progress_line("compare", what="resampled histories compared"))
    if plot:
        draw(comparison, plot, history=loaded, band=band)
    click.echo(report.to_json(as_json(comparison, loaded, band)) if fmt == "json" else render(comparison, fmt, loaded, band))


def _history_scenario(path, fmt, timezone, skip_bad, scenario, hardware, nodes, prices):
    """The comparison's scenario with the history as its demand, over the history's span."""
    from dataclasses import replace as with_fields

    from costsim.fleet.demand import Replay
    from costsim.io.history import load_history
    from costsim.io.scenario import load_scenario
    from costsim.whatif_fleet import scenario_for_hardware
    if bool(scenario) == bool(hardware):
        raise click.UsageError("--history needs --hardware SKU (owned vs every cloud offering of its GPU) or "
                               "--scenario (its strategies, with the history as demand)")
    loaded = load_history(path, fmt=fmt, tz=timezone, skip_bad=skip_bad)
    sources = (Replay(name="history", rows=tuple(loaded.jobs)),)
    if hardware:
        spec = scenario_for_hardware(Path(path).name, hardware, nodes, loaded.span_s, sources=sources, catalog=prices)
    else:
        spec = with_fields(load_scenario(scenario, prices), sources=sources, horizon_s=loaded.span_s)
    return with_fields(spec, description=f"{spec.description}; demand: {loaded.summary()}"), loaded


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
@click.option("--out", type=OUTPUT, help="where to write the calibrated profile "
              "(default: <profile>.calibrated.yaml beside the runs' first folder); with --market, the spot model "
              "file (nothing is written without it)")
@click.option("--market", is_flag=True, help="fit the spot market instead: the arguments are capacity traces, "
              "run folders and control.json journals; per offering, time to preemption (censored Weibull) and "
              "time until capacity is back, with 95% intervals")
@click.option("--offering", help="with --market: only this offering (an id, or a label for traces, which name none; "
              "default label `traces`)")
@click.option("--gpu", help="the GPU type the runs ran on, a type of the profile (H100), for runs whose telemetry "
              "does not name their device (runners before 2026-12-06); default: what it names, else the plan's")
@output_options
def calibrate_command(runs, profile_ref, out, market, offering, gpu, fmt):
    """Refit throughput, checkpoint and restart figures from runs; report the prediction errors.

    Example: costsim calibrate runs/demo --out tiny-measured.yaml

    The H200 plan run on an H100 by a runner that did not record its device: costsim calibrate runs/old --gpu H100

    Spot market: costsim calibrate --market data/traces/aws-2023-02-15 --offering aws-gpu --out fitted.yaml
    """
    if market:
        if profile_ref or gpu:
            raise click.UsageError(f"{'--profile' if profile_ref else '--gpu'} goes without --market (a spot model "
                                   "has no throughput profile)")
        return _calibrate_market(runs, offering, out, fmt)
    if offering:
        raise click.UsageError("--offering goes with --market")
    from costsim.calibrate import (
        calibrate,
        load_runs,
        plan_profile,
        report_rows,
        updated_profile_document,
    )
    seen: dict[Path, str] = {}
    for ref in runs:   # a run given twice would weigh twice in every fit
        if (key := Path(ref).resolve()) in seen:
            raise InputError(ref, "runs", f"given twice (also as {seen[key]}): give each run once, or it weighs "
                             "twice in every fit")
        seen[key] = ref
    loaded, stops = load_runs(list(runs))
    profile = (io.load_profile_for(loaded[0].plan.workload.model, profile_ref, user="runs' workload") if profile_ref
               else plan_profile(loaded[0]))
    result = calibrate(loaded, profile, gpu=gpu, out_of_memory=stops)
    target = str(outside_shipped_data(out or loaded[0].path / f"{Path(profile.path).stem}.calibrated.yaml"))
    import yaml
    io.write_atomic(target, yaml.safe_dump(updated_profile_document(profile.path, result), sort_keys=False))
    click.echo(f"wrote the calibrated profile to {target} (plan with --profile {target})", err=True)
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


def _calibrate_market(refs, offering, out, fmt):
    import datetime

    import yaml

    from costsim.io.market import read_market
    from costsim.io.specs import BUNDLE_SUFFIX
    from costsim.market_fit import MIN_EVENTS, fit_market, fit_record, model_document
    # a folder of traces stands for its files; a run folder (it holds telemetry.jsonl) and a bundle (its windows
    # stitched into the trace they were cut from, where they were: io.market.read_market) for themselves
    sources = [s for ref in refs for s in ([ref] if (Path(ref) / TELEMETRY).exists() or ref.endswith(BUNDLE_SUFFIX)
                                            else _trace_files([ref]))]
    notes: list[str] = []
    observed = read_market(sources, offering, notes)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    if not observed:
        raise InputError(", ".join(refs), "offering", f"no spot lives of {offering!r} in these sources" if offering
                         else "no spot lives in these sources")
    records = [fit_record(fit_market(label, lives, outages)) for label, (lives, outages) in sorted(observed.items())]
    if out:
        outside_shipped_data(out)
        command = "costsim calibrate --market " + " ".join(refs) + (f" --offering {offering}" if offering else "")
        io.write_atomic(out, yaml.safe_dump(model_document(records, datetime.date.today().isoformat(), command),
                                            sort_keys=False))
    if fmt == "json":
        click.echo(report.to_json({"offerings": records, "min_events": MIN_EVENTS, "out": out}))
        return
    click.echo(report.table(["offering", "lives", "preempted", "censored", "Weibull shape", "mean up", "naive mean up",
                             "outages", "mean outage"], [_market_row(r) for r in records], fmt))
    if fmt == "table":
        click.echo(f"95% intervals in brackets; ! a figure from fewer than {MIN_EVENTS} events. Naive: every life "
                   "counted as a preemption (censoring ignored).")
        if out:
            click.echo(f"wrote {out}")


def _cut_short_note(results) -> str:
    """What validate's windows that ended before their job could not say (validate.judged)."""
    short = [r for r in results if r.cut_short or r.not_judged]
    if not short:
        return ""
    return (f" Traces that ended before the job ({', '.join(r.group for r in short)}): "
            f"{sum(r.cut_short for r in short)} windows judged on P(deadline) alone (the job's end unseen), "
            f"{sum(r.not_judged for r in short)} not judged (they ended before the deadline too); windows counts "
            "the judged.")


def _market_row(r: dict) -> list:
    def figure(value, name, unit_s=True):
        if value is None:
            return "-"
        ci = r["ci"].get(name)
        text = f"{value / 3600:.3g}h" if unit_s else f"{value:.3g}"
        if ci:
            text += f" [{ci[0] / 3600:.3g}, {ci[1] / 3600:.3g}]" if unit_s else f" [{ci[0]:.3g}, {ci[1]:.3g}]"
        return text + (" !" if name in r["thin"] else "")
    naive = r["naive_mean_up_s"]
    bias = f" ({naive / r['mean_up_s'] - 1:+.1%})" if naive and r["mean_up_s"] else ""
    return [r["offering"], r["preemptions"] + r["censored"], r["preemptions"], r["censored"],
            "1 (pinned) !" if r["weibull_shape_pinned"] else figure(r["weibull_shape"], "weibull_shape", unit_s=False),
            figure(r["mean_up_s"], "mean_up_s")
            + (f" {r['mean_up_method']}" if r["mean_up_method"] == "weibull" else ""),
            f"{naive / 3600:.3g}h{bias}" if naive else "-", r["outages"] + r["outages_censored"],
            figure(r["mean_outage_s"], "mean_outage_s")]


def _calibration_rows(rows):
    from costsim.calibrate import relative_error
    out = []
    for row in rows:
        for figure in ("step_s", "samples_per_s", "wall_s", "checkpoint_stall_s", "restart_s",
                       "store_write_gb_per_s", "store_read_gb_per_s"):
            if figure not in row:
                continue
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


def _short_label(label: str | None) -> str:
    """aws/us-east-1/p5en.48xlarge H200x8x1 blocks spot-only ckpt=155s -> p5en.48xlarge x1 spot-only."""
    if not label:
        return "-"
    words = label.split(" ckpt=")[0].split()
    nodes = words[1].split("x")[-1]
    return f"{words[0].split('/')[-1]} x{nodes} {words[-1]}"


def _share(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


@cli.command("validate")
@planning_options
@click.option("--stride", type=DURATION, default="6h", show_default=True,
              help="a long trace's real windows start this far apart")
@click.option("--group", "groups", multiple=True, help="leave out only these groups (repeatable; default: each)")
@click.option("--replay-share", type=click.FloatRange(0, 1), help="the share of trials that replay a real window "
              "(default: the catalog's); the rest draw from the group's fit")
@click.option("--plot", type=PLOT, help="stated vs realised P(deadline) and reliability, PNG")
@click.option("--recent-past", type=DURATION, help="judge plans told the recent capacity (costsim plan "
              "--recent-trace): each held-out window's share of this past with capacity, binned, one plan a bin; e.g. "
              "72h (windows without that much past are left out: without --recent-past they are judged)")
@click.option("--recent-bandwidth", type=click.FloatRange(0, 1, min_open=True),
              help="with --recent-past: how alike two pasts' shares count (costsim plan's; default 0.1)")
@click.option("--recent-state/--no-recent-state", default=None,
              help="with --recent-past: each bin's plan is also told whether the market had capacity at the window's "
                   "start and since when, binned by state and age, as a --recent-trace tells a plan (default); "
                   "--no-recent-state: the share only, as --recent-share alone")
@market_options
@catalog_option
@output_options
def validate_command(workload, gpus, policies_, nodes, deadline, risk, trials, seed, stride, groups, replay_share,
                     jobs, plot, recent_past, recent_bandwidth, recent_state, market, market_traces, home_weight,
                     catalog_ref, fmt):
    """Leave each capacity group out, plan without it, replay the choice on its real windows: is the
    plan's P(deadline) and P10-P90 band true of capacity its market never saw?

    Example: costsim validate --workload sdxl --gpu H200 --policy spot-only --plot validate.png
    """
    from costsim import validate as validation
    from costsim.validate import COVERAGE_BAND, P_TOLERANCE, market_for_validation, pooled, reliability, validate
    from costsim.validate import plot as plot_validation
    if market == "fit":
        raise click.UsageError("--market fit has no capacity groups to leave out: use ensemble or traces")
    spec = io.load_workload(workload)
    profile = io.load_profile_for(spec.model, spec.profile)
    offerings = market_for_validation(offerings_for(spec, tuple(gpus) or None, load_catalog(catalog_ref)),
                                      market or "ensemble", tuple(market_traces), replay_share)
    options = PlanOptions(trials=trials, seed=seed, risk=risk, deadline_s=deadline, jobs=jobs,
                          policies=tuple(policies_) or None, nodes=tuple(nodes) or None)
    report_progress = progress_line("validate", what="groups left out")
    from costsim.ensemble import DEFAULT_RECENT_BANDWIDTH
    for flag, value in (("--recent-bandwidth", recent_bandwidth),
                        ("--recent-state" if recent_state else "--no-recent-state", recent_state)):
        if value is not None and not recent_past:
            raise click.UsageError(f"{flag} goes with --recent-past")
    home_weight = _home_weight(home_weight, market or "ensemble")
    results = validate(spec, profile, offerings, options, stride_s=stride, groups=tuple(groups) or None,
                       home_weight=home_weight,
                       progress=lambda done, total, name: report_progress(done, total), recent_past_s=recent_past,
                       recent_bandwidth=recent_bandwidth or DEFAULT_RECENT_BANDWIDTH,
                       recent_state=recent_state is not False)
    longest = [r.longest_past_s for r in results if r.longest_past_s is not None]
    if recent_past and results and not any(r.windows for r in results) and longest:
        raise click.UsageError(f"--recent-past {format_duration(recent_past)}: no held-out window has that much trace "
                               f"before it (all {sum(r.no_past for r in results)} left out; the most any has is "
                               f"{format_duration(max(longest))}); give a shorter past")
    table = reliability(results)
    overall = pooled(results)
    honest = [r for r in results if r.honest]
    noise = [r for r in results if r.within_noise]
    judged = [r for r in results if r.honest is not None]
    ideal = [r for r in results if r.ideal_honest]
    if fmt == "json":
        click.echo(report.to_json({"groups": [r.as_dict() for r in results], "pooled": overall, "reliability": table,
                                   "goal": {"p_tolerance": P_TOLERANCE, "coverage": list(COVERAGE_BAND)},
                                   "honest_groups": len(honest), "within_noise_groups": len(noise),
                                   "honest_if_right_groups": len(ideal), "judged_groups": len(judged),
                                   "home_weight": home_weight}))
    else:
        rows = [[r.group, ("" if r.meets_target else "x ") + _short_label(r.chosen), r.windows,
                 _share(r.stated_p), _share(r.realised_p), f"{r.p_error:+.3f}" if r.p_error is not None else "",
                 _share(r.cost_coverage), _share(r.finish_coverage), _num(r.crps),
                 {True: "yes", False: "noise" if r.within_noise else "no", None: ""}[r.honest],
                 _if_right(r)] for r in results]
        stated, real = overall["stated_p_deadline"], overall["realised_p_deadline"]
        rows.append(["pooled", "", sum(r.windows for r in results), _share(stated), _share(real),
                     f"{stated - real:+.3f}" if stated is not None and real is not None else "",
                     _share(overall["cost_coverage"]), _share(overall["finish_coverage"]), _num(overall["cost_crps"]),
                     "", ""])
        click.echo(report.table(["left out", "chosen without it", "windows", "stated", "realised", "error",
                                 "cost in", "finish in", "CRPS", "goal", "if right"], rows, fmt))
        if fmt == "table":
            click.echo(report.wrap(
                "chosen: the plan's choice without the group (x: nothing met the target, so its cheapest candidate)"
                + (f", made for a job in the group's region (the other groups measured there weigh {home_weight:g}x, "
                   "--home-weight)" if home_weight != 1.0 else "") + "; "
                f"stated: its P(deadline); realised: the share of the group's real "
                f"windows ({format_duration(stride)} apart on a long trace) that met it; cost in / finish in: the "
                f"share of realised costs and finishes inside the plan's P10-P90 (honest: 80%; one on an atom of the "
                f"plan's distribution counts in part, by its randomised PIT); CRPS of the cost, "
                f"lower is better. Goal: |error| <= {P_TOLERANCE} and both shares within "
                f"{COVERAGE_BAND[0]:.0%}-{COVERAGE_BAND[1]:.0%}; met on {len(honest)} of {len(judged)} groups; "
                f"noise: missed by less than two standard errors ({len(noise)} groups): windows that overlap are not "
                "independent, so each share's standard error counts blocks of overlapping windows (JSON: realised_se, "
                "cost_coverage_se, finish_coverage_se, blocks). "
                "Pooled: every group, each weighing the same, as in the ensemble. If right: the goal judged on the group's "
                "own part of the ensemble (its replays and fit, JSON: if_right) in place of its real windows, and the "
                "figure farthest from it: what a plan that does not know the group reaches if the market is true; "
                f"met on {len(ideal)} of {len(judged)}: where it misses too, the groups differ by more than one band "
                "can cover."
                + (f" Told the recent capacity: each window's share of the {format_duration(recent_past)} before it "
                   "with capacity, binned by fifths"
                   + (", and its state then (up or down) and that state's age, binned at "
                      + ", ".join(f"{h:g}" for h in validation.RECENT_AGE_BINS_H) + " h"
                      if recent_state is not False else "")
                   + ", one plan a bin told the bin's mean; stated is the mean of the "
                   "windows' statements, chosen the plan for most windows (+N: others chose differently); if right "
                   "is not judged; windows with less past than that cannot be told it and are left out "
                   f"({sum(r.no_past for r in results)}, JSON: no_past; validate without --recent-past judges them)."
                   if recent_past else "")
                + (" A gang of n nodes runs while each of n windows of the group has capacity, spread evenly over "
                   "the group's windows" + (" with the same past, binned as above (nodes of one market at one time "
                                            "share theirs; distinct, none sharing an hour where the bin allows, "
                                            "and a bin with fewer windows than the gang borrows those whose past "
                                            "the plan weighs most)" if recent_past else "")
                   + "; a count trace's gang meets its one window." if max(nodes, default=2) > 1 else "")
                + _cut_short_note(results)))
            click.echo()
            click.echo(report.table(["stated P(finish by t)", "pairs", "mean stated", "realised"],
                                    [[f"{row['bin'][0]:.1f}-{row['bin'][1]:.1f}", row["count"], _share(row["stated"]),
                                      _share(row["realised"])] for row in table], fmt))
            click.echo(report.wrap("reliability: every window's finish against the plan's stated probability of "
                                   "finishing by 0.5, 0.75, 1, 1.25 and 1.5 deadlines, binned"))
    if plot:
        plot_validation(results, table, plot, f"{spec.name}: leave one capacity group out ({trials} trials a plan)")
        if fmt == "table":
            click.echo(f"wrote {plot}")


def _if_right(r) -> str:
    """validate's `if right` cell: the goal on the group's own part of the ensemble, and its figure farthest
    from the goal (the P(deadline) error where that misses, else the share farthest from 80%)."""
    from costsim.validate import P_TOLERANCE
    if r.ideal_honest is None:
        return ""
    verdict = "yes " if r.ideal_honest else "no "
    error = r.stated_p - r.ideal_p
    if abs(error) > P_TOLERANCE:
        return verdict + f"{error:+.2f}"
    shares = [c for c in (r.ideal_cost_coverage, r.ideal_finish_coverage) if c is not None]
    return verdict + (f"{max(shares, key=lambda c: abs(c - 0.8)):.0%}" if shares else "")


@cli.command("export")
@click.argument("plan", type=click.Path(dir_okay=False))
@click.option("--to", "target", type=click.Choice(["skypilot", "slurm"]), required=True)
@click.option("--out", type=OUTPUT, help="write here instead of stdout")
@click.option("--bucket", help="SkyPilot: an existing bucket for run folders and checkpoints, with its scheme, e.g. "
              "s3://my-ckpts (default: a new one; with an s3:// checkpoint location in the plan: none, run folders "
              "on the node)")
@click.option("--workdir", type=click.Path(file_okay=False, exists=True), help="SkyPilot: the costsim repository "
              "the nodes install from (default: the one this costsim runs from)")
@click.option("--shared-dir", default="$HOME/costsim-runs", show_default=True,
              help="Slurm: a folder every node sees, for run folders and checkpoints (a relative one is made "
              "absolute; it may begin with an environment variable of the nodes, e.g. $HOME)")
@click.option("--time-limit", type=DURATION, help="Slurm: each run's time limit (default: the shorter of the "
              "plan's deadline and its P90 finish x 1.25 + 30 min)")
def export_command(plan, target, out, bucket, workdir, shared_dir, time_limit):
    """Export a plan as a SkyPilot task YAML or a Slurm batch script that runs `runner execute`.

    The SkyPilot task uploads the plan (and any workload option that names a local file) as file
    mounts; an s3:// checkpoint location brings the store extra, AWS_ENDPOINT_URL and AWS_REGION from
    this environment, and the keys as secrets given at launch. The Slurm script names the plan by
    its absolute path (the nodes read it through the shared filesystem).

    Example: costsim export plan.json --to slurm --out job.sbatch
    """
    from costsim.export import PlanFile, skypilot_task, slurm_script, workdir_of
    source = PlanFile.read(plan)
    if target == "skypilot":
        text = skypilot_task(source, workdir=workdir_of(workdir), bucket=bucket, store_env=os.environ, task_file=out)
    else:
        text = slurm_script(source, shared_dir=shared_dir, time_limit=time_limit)
    if out:
        io.write_atomic(out, text)
        click.echo(f"wrote {out}", err=True)
    else:
        click.echo(text, nl=False)


@cli.command("control")
@click.argument("plan", type=click.Path(dir_okay=False))
@click.option("--backend", type=click.Choice(["local", "slurm"]), help="local (the default): this machine stands for "
              "both markets, spot follows --trace; slurm: partitions spot and on-demand of a real Slurm (docs/control.md)")
@click.option("--run-dir", type=click.Path(file_okay=False), help="the job's run folder and the controller's journal "
              "(control.json); given again, the controller picks up where it was (default: runs/control-<time>)")
@click.option("--policy", type=click.Choice(sorted(POLICIES)), help="default: the plan's policy.name")
@click.option("--trace", type=click.Path(dir_okay=False), help="local: the spot capacity trace to replay (the "
              "simulator's format, 0 = capacity)")
@click.option("--spot-partition", help="slurm: the partition that sells spot (default spot)")
@click.option("--on-demand-partition", help="slurm: the partition that sells on-demand (default on-demand)")
@click.option("--reclaim-trace", type=click.Path(dir_okay=False), help="slurm drills: while this trace says capacity "
              "is gone, high-priority jobs take the spot partition's node and Slurm preempts the job")
@click.option("--time-scale", type=POSITIVE, help="trace seconds per wall second (a drill replays a day in minutes; "
              "default 1)")
@click.option("--notice", type=DURATION_OR_ZERO, help="local: spot notice before a reclaim, in trace time "
              "(default: the plan's spot_notice_s)")
@click.option("--deadline", type=DURATION, help="in trace time (default: the plan's policy.deadline_s)")
@click.option("--poll", type=DURATION, help="wall time between looks at the job and the market (default 0.5s)")
@click.option("--steps", type=click.IntRange(min=1), help="runner: stop after this many steps (the job's length)")
@click.option("--seed", type=SEED, help="runner: its --seed")
@click.option("--nproc-per-node", type=click.IntRange(min=1), help="runner: its --nproc-per-node")
@click.option("--option", "options", multiple=True, help="runner: KEY=VALUE for the workload (repeatable)")
@click.option("--runtime", "runtime", multiple=True, help="runner: KEY=VALUE runner settings (repeatable)")
@click.option("--plot", type=PLOT, help="progress against time with market bands, PNG")
@output_options
def control_command(plan, backend, run_dir, policy, trace, spot_partition, on_demand_partition, reclaim_trace,
                    time_scale, notice, deadline, poll, steps, seed, nproc_per_node, options, runtime, plot, fmt):
    """Carry out a plan's market policy while the job runs, and bill what happened against the prediction.

    Example: costsim control drill.json --policy uniform-progress --trace data/traces/cbl-us-west-2a-v100/59.json
    --time-scale 600 --deadline 14h --notice 10m --steps 6000 --poll 0.1s --run-dir runs/drill --plot drill.png
    """
    from costsim.control import session
    if trace and backend == "slurm":
        raise click.UsageError("--trace is the local backend's capacity; on slurm give --reclaim-trace")
    if reclaim_trace and backend != "slurm":
        raise click.UsageError("--reclaim-trace is for --backend slurm; on local give --trace")
    if (spot_partition or on_demand_partition) and backend != "slurm":
        raise click.UsageError("--spot-partition and --on-demand-partition are for --backend slurm")
    if notice is not None and backend == "slurm":
        raise click.UsageError("on slurm the notice is the spot partition's GraceTime, not --notice")
    for option in options:
        if "=" not in option:
            raise click.BadParameter(f"{option!r}: expected KEY=VALUE", param_hint="--option")
    from costsim.runtime import parse_pairs
    parse_pairs(runtime)   # a bad runner setting fails here, before any instance (options: the runner checks)
    runner_args = [*(["--steps", str(steps)] if steps else []), *(["--seed", str(seed)] if seed is not None else []),
                   *(["--nproc-per-node", str(nproc_per_node)] if nproc_per_node else []),
                   *(a for o in options for a in ("--option", o)), *(a for r in runtime for a in ("--runtime", r))]
    request = session.Request(plan=plan, backend=backend, run_dir=run_dir, policy=policy, trace=trace,
                              reclaim_trace=reclaim_trace, time_scale=time_scale, notice_s=notice, deadline_s=deadline,
                              poll_s=poll, runner_args=runner_args, steps=steps,
                              partitions={m: n for m, n in (("spot", spot_partition), ("on-demand", on_demand_partition))
                                          if n} or None)
    say = lambda line: click.echo(line, err=True)  # noqa: E731
    controller, journal, lock, context = session.open_session(request, say)
    try:
        if journal.status == "running":
            controller.run()
        doc = session.finish(controller, journal, context)
    finally:
        controller.backend.close()
        lock.release()
    if plot:
        from costsim.control.plot import plot_run
        plot_run(journal, context["run_dir"], controller.plan.total_steps, plot)
        click.echo(f"wrote {plot}", err=True)
    if fmt == "json":
        click.echo(report.to_json(journal.to_dict()))
    else:
        click.echo(report.table(CONTROL_HEADERS, _control_rows(doc), fmt))
        if fmt == "table":
            click.echo(report.wrap(CONTROL_LEGEND))
            margin = doc.get("margin_max_s")
            click.echo(f"{journal.status}; {doc['restarts']} restarts, {doc['preemptions']} preemptions, "
                       f"{doc['moves']} moves" + (f", margin up to {margin / 3600:.2f} h" if margin else "")
                       + f"; journal {Path(context['run_dir']) / 'control.json'}")
    if journal.status != "done":
        raise SystemExit(1)


def _control_rows(doc: dict) -> list[list[str]]:
    """Actual against the three predictions: as known (the controller's own information at each decision:
    measures the controller), hindsight (the run's final figures: the path), the plan's band."""
    known, hindsight, band = doc.get("predicted") or {}, doc.get("hindsight") or {}, doc.get("plan") or {}
    hours = lambda s: "never" if s is None else f"{s / 3600:.2f} h"  # noqa: E731
    money = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    rows = [["cost", f"{doc['cost']:.2f} {doc['bill']['currency']}", money(known.get("cost")),
             _pct(doc["error"]["cost_rel"]), money(hindsight.get("cost")), _pct(doc["error_hindsight"]["cost_rel"]),
             f"{money(band.get('cost_p50'))} / {money(band.get('cost_p90'))}" if band else "-"],
            ["finish", hours(doc["finish_s"]), hours(known.get("finish_s")) if known else "-",
             _pct(doc["error"]["finish_rel"]), hours(hindsight.get("finish_s")) if hindsight else "-",
             _pct(doc["error_hindsight"]["finish_rel"]),
             f"{hours(band.get('finish_p50_s'))} / {hours(band.get('finish_p90_s'))}" if band else "-"],
            ["deadline", hours(doc["deadline_s"]), "met" if known.get("deadline_met") else "missed" if known else "-",
             "", "", "", "", ]]
    rows[-1][1] += " (met)" if doc["deadline_met"] else " (missed)"
    for market, entry in sorted(doc["bill"]["markets"].items()):
        predicted_h = sum(s["end_s"] - s["start_s"] for s in known.get("markets", []) if s["market"] == market)
        rows.append([f"{market} hours", f"{entry['hours']:.2f}", f"{predicted_h / 3600:.2f}" if known else "-",
                     "", "", "", ""])
    return rows


CONTROL_HEADERS = ["", "actual", "as known", "error", "hindsight", "error", "plan P50 / P90"]
CONTROL_LEGEND = ("as known: the simulator on the same capacity, each decision on the figures the controller had then "
                  "(its error measures the controller); hindsight: with the run's final figures (measures the path); "
                  "plan: the plan's band for this policy.")


@cli.command("catalog")
@click.option("--gpu", help="only this GPU type, e.g. H100")
@click.option("--import", "import_dir", type=click.Path(file_okay=False), help="read SkyPilot's catalog files "
              "(DIR/<cloud>/vms.csv, e.g. ~/.sky/catalogs/v8) into a dated overlay of the shipped catalog (--out)")
@click.option("--out", type=OUTPUT_FOLDER, help="with --import: the overlay folder to write "
              "(default: catalog-<today>)")
@catalog_option
@output_options
def catalog_command(gpu, import_dir, out, catalog_ref, fmt):
    """List cloud offerings with their dated prices (USD per instance-hour), or import the user's own.

    Example: costsim catalog --gpu H100

    Your own SkyPilot's prices: costsim catalog --import ~/.sky/catalogs/v8 --out my-prices

    (then `--catalog my-prices` on plan, simulate and compare)
    """
    if import_dir:
        if catalog_ref:
            raise click.UsageError("--import makes an overlay of the shipped catalog; --catalog reads one: not both")
        return _import_catalog(import_dir, out)
    if out:
        raise click.UsageError("--out goes with --import")
    offerings = load_catalog(catalog_ref)
    if gpu:
        named = gpu_names((gpu,), {o.gpu for o in offerings}, "--gpu", "gpu")
        offerings = [o for o in offerings if o.gpu in named]
    records = [{"offering": o.id, "gpu": o.gpu, "gpus_per_node": o.gpus_per_node, "on_demand_per_h": o.on_demand_per_h,
                "spot_per_h": o.spot_per_h, "spot_notice_s": o.spot_notice_s,
                "spot_model": o.spot_model.name if o.spot_model else None, "provision_s": o.provision_s,
                "currency": o.currency, "read_date": o.read_date, "source": o.source, "catalog": o.catalog}
               for o in offerings]
    if fmt == "json":
        click.echo(report.to_json(records))
        return
    keys = ["offering", "gpu", "gpus_per_node", "on_demand_per_h", "spot_per_h", "spot_notice_s", "read_date", "catalog"]
    if fmt == "csv":
        click.echo(report.table(keys, [[r[k] if r[k] is not None else "" for k in keys] for r in records], fmt))
        return
    rows = [[o.id, o.gpu, o.gpus_per_node, f"{o.on_demand_per_h:,.2f}",
             "-" if o.spot_per_h is None else f"{o.spot_per_h:,.2f}",
             "-" if o.spot_notice_s is None else format_duration(o.spot_notice_s), o.read_date] for o in offerings]
    currency = offerings[0].currency if offerings else "USD"
    click.echo(report.table(["offering", "GPU", "per node", f"on-demand {currency}/h", f"spot {currency}/h", "notice",
                             "prices read"], rows, fmt))
    if fmt == "table":
        click.echo(report.wrap(f"Catalog: {catalog_ref or 'built-in'}. Prices per instance-hour (per node); notice: "
                               "the warning before a spot reclaim. --format csv or json for the full figures and "
                               "sources."))


def _import_catalog(source: str, out: str | None) -> None:
    import datetime

    from costsim.io.catalog import import_skypilot
    target = outside_shipped_data(out or f"catalog-{datetime.date.today().isoformat()}")
    done = import_skypilot(Path(source).expanduser(), target)
    click.echo(f"read {len(done.files)} SkyPilot catalog file(s): {', '.join(str(f) for f in done.files)}")
    click.echo(f"{len(done.updated)} offerings priced from them; {len(done.not_quoted)} not in them (shipped prices "
               f"kept); {len(done.mismatched)} with other GPUs there (kept)")
    for line in done.mismatched:
        click.echo(f"  other GPUs: {line}")
    click.echo(f"wrote {target}: plan with `costsim plan --catalog {target}` (compare and simulate take it too)")


def main(argv: list[str] | None = None) -> None:
    """Entry point (see costsim.entry for the error contract)."""
    run(cli, "costsim", argv)
