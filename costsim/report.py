"""Tables (tabulate) and plots (matplotlib) of results; the only module that formats for people."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import textwrap
from pathlib import Path

from tabulate import tabulate

from costsim.planfile import spot_model_name
from costsim.policies import POLICY_MARKETS
from costsim.spec import SPOT
from costsim.units import format_duration, format_probability

TABLE_WIDTH = 120   # what a default table fits; --wide shows every column


def plan_table(result, wide: bool = False) -> tuple[list[str], list[list], str]:
    """The ranked candidates as (headers, rows, legend): the default fits TABLE_WIDTH; `wide` adds the
    checkpoint interval, the saving, throughput and preemptions and spells the headers out."""
    currency = result.ranked[0].configured.candidate.offering.currency if result.ranked else ""
    groups = any(r.stats.worst_group is not None for r in result.ranked)
    finishes = [v for r in result.ranked for v in (r.stats.makespan_p10_s, r.stats.makespan_p50_s,
                                                    r.stats.makespan_p90_s) if math.isfinite(v)]
    unit, per = _finish_unit(max(finishes, default=0.0))
    headers = ["", "offering", "GPUs", "policy", *(["ckpt"] if wide else []),
               f"finish {unit} P10/50/90" if wide else f"finish {unit}", "cost" if not wide else f"mean cost {currency}",
               "P10/50/90", "P(deadline)" if wide else "met", *(["worst group" if wide else "worst"] if groups else []),
               *(["saving", "samples/s", "preemptions"] if wide else [])]
    rows = []
    shown: set = set()
    for r in result.ranked:
        c, s = r.configured.candidate, r.stats
        group = (c.offering.id, c.variant, c.nodes, c.policy)
        if not wide and group in shown and r is not result.chosen:
            continue   # another checkpoint interval of a configuration shown above (--wide lists each)
        shown.add(group)
        mark = "*" if r is result.chosen else ("" if r.meets_target else "x")
        saving = "" if r.saving_vs_on_demand is None else f"{100 * r.saving_vs_on_demand:.0f}%"
        runner = f" {c.variant}" if c.variant else ""   # the profile's runner configuration, if it has several
        worst = s.worst_group_p_deadline
        rows.append([mark, c.offering.id, f"{c.offering.gpu} {c.offering.gpus_per_node}x{c.nodes}{runner}", c.policy,
                     *([format_duration(c.checkpoint_interval_s)] if wide else []),
                     "/".join(_short(v / per) for v in (s.makespan_p10_s, s.makespan_p50_s, s.makespan_p90_s)),
                     f"{s.cost_mean:,.2f}", "/".join(f"{v:,.0f}" for v in (s.cost_p10, s.cost_p50, s.cost_p90)),
                     _percent(s.p_deadline, 1), *([("" if worst is None else _percent(worst, 0))] if groups else []),
                     *([saving, f"{r.configured.step.samples_per_s:,.1f}", f"{s.preemptions_mean:.2f}"] if wide else [])])
    legend = ("* chosen, x misses the target. GPUs: type, per node x nodes, runner configuration (when the profile "
              "has several); finish and cost: P10/P50/P90 of the trials, cost's first column its mean"
              + ("" if wide else f", in {currency}") + ("; P(deadline)" if wide else "; met")
              + ": share of trials meeting the deadline"
              + ("; worst: that share in the trials of the capacity group that does worst (the spot market is an "
                 "ensemble of real capacity groups: docs/model.md)" if groups else "")
              + ("; saving: against the cheapest on-demand plan that meets the target" if wide
                 else "; --wide for the checkpoint interval (each one tried), saving and more") + ".")
    return headers, rows, legend


def spot_note(result) -> str | None:
    """When the choice uses no spot although spot was on offer, why: the cheapest spot plan misses the
    target (the market's worst group says how badly)."""
    chosen = result.chosen
    if chosen is None or SPOT in POLICY_MARKETS[chosen.configured.candidate.policy]:
        return None
    spot = [r for r in result.ranked if SPOT in POLICY_MARKETS[r.configured.candidate.policy]
            and r.stats.cost_mean < chosen.stats.cost_mean]
    if not spot:
        return None
    cheapest = min(spot, key=lambda r: r.stats.cost_mean)
    s = cheapest.stats
    worst = (f", {_percent(s.worst_group_p_deadline, 0)} in its worst capacity group ({s.worst_group})"
             if s.worst_group is not None and s.worst_group_p_deadline is not None else "")
    return (f"note: nothing that uses spot meets P(deadline) >= {format_probability(result.target)} for less than "
            f"the choice: the cheapest, {cheapest.configured.candidate.label}, costs {s.cost_mean:,.2f} on average "
            f"and meets the deadline in {_percent(s.p_deadline, 1)} of trials{worst}.")


def recent_note(result) -> str | None:
    """When the market was told the job's recent capacity (--recent-trace/--recent-share): what and how; where a
    spot ensemble was told nothing, that (told it, a plan's statement holds group by group far better: docs/model.md,
    "Built: a plan told the recent capacity")."""
    ensembles = False
    for r in result.ranked:
        market = r.configured.config.market
        recent = market.spec.recent if market is not None else None
        ensembles = ensembles or (market is not None and bool(market.spec.groups)
                                  and SPOT in POLICY_MARKETS[r.configured.candidate.policy])
        if recent is not None:
            top = len(recent.gang_shares)   # a count trace's: 2, 4, 8 ... and the most it counts
            gangs = "".join(f", {n} could be had {_percent(recent.gang_shares[n - 1], 0)}" for n in range(2, top + 1)
                            if n == top or n & (n - 1) == 0)
            now = f", {recent.state.describe(recent.past_s)} now" if recent.state is not None else ""
            return (f"recent capacity: {_percent(recent.share, 0)} of the last {recent.past_s / 3600:g} h had spot"
                    f"{now} ({recent.source}{gangs}); the trials replay real windows only, each weighed by how like "
                    f"that its own past was (kernel width {recent.bandwidth:g}; docs/model.md).")
    if ensembles:
        return ("recent capacity: not told, so the spot trials meet every capacity group as the ensemble weighs them, "
                "whatever the market has done lately; --recent-trace FILE or --recent-share tells the plan "
                "(docs/model.md).")
    return None


def home_note(result) -> str | None:
    """Where an offering's region weighs its capacity groups more (MarketSpec.home): which, and how much."""
    homes: dict[str, tuple[int, int, float]] = {}
    for r in result.ranked:
        market = r.configured.config.market
        spec = market.spec if market is not None else None
        if spec is not None and spec.home and spec.home not in homes:
            homes[spec.home] = (sum(g.region == spec.home for g in spec.groups), len(spec.groups), spec.home_weight)
    if not homes:
        return None
    said = "; ".join(f"{region}'s {n} of {total} weigh {weight:g}x" for region, (n, total, weight) in homes.items())
    return (f"spot capacity groups measured in the offering's region weigh more ({said}; --home-weight, "
            "docs/model.md).")


def _percent(p: float, decimals: int) -> str:
    """71.8%, and 100% for a certainty (a column's widest cell would otherwise be 100.0%)."""
    return "100%" if p >= 1.0 else f"{100 * p:.{decimals}f}%"


def _finish_unit(longest_s: float) -> tuple[str, float]:
    """The finish column's unit: hours, or minutes or seconds for a job whose trials all end within the hour
    (a CPU drill's 0.00/0.00/0.00 h said nothing)."""
    return ("h", 3600.0) if longest_s >= 3600 else ("m", 60.0) if longest_s >= 60 else ("s", 1.0)


def _short(value: float) -> str:
    """A figure in at most 4 characters: 0.45, 4.7, 36, 144; never for an unfinished trial."""
    if not math.isfinite(value):
        return "never"
    return f"{value:.2f}" if value < 1 else f"{value:.1f}" if value < 10 else f"{value:.0f}"


def candidate_record(r) -> dict:
    """A ranked candidate as plain data (JSON and CSV output)."""
    c = r.configured.candidate
    return {"offering": c.offering.id, "gpu": c.offering.gpu, "gpus_per_node": c.offering.gpus_per_node,
            "nodes": c.nodes, "policy": c.policy, "checkpoint_interval_s": c.checkpoint_interval_s,
            "samples_per_s": r.configured.step.samples_per_s, "work_s": r.configured.config.params.work_s,
            "meets_target": r.meets_target, "saving_vs_on_demand": r.saving_vs_on_demand,
            "profile_source": r.configured.gpu.source, "variant": c.variant or None,
            "spot_model": spot_model_name(c.offering, c.policy),
            "checkpoint_storage": r.configured.checkpoints.store.name, **r.stats.as_dict()}



def wrap(text: str) -> str:
    """A note for people, in lines that fit TABLE_WIDTH."""
    return textwrap.fill(text, TABLE_WIDTH, break_on_hyphens=False)


_NUMBER = re.compile(r"^[-+]?[0-9][0-9,.]*(e[-+]?[0-9]+)?\s?[a-zA-Z%/]{0,3}$")


def table(headers: list[str], rows: list[list], fmt: str) -> str:
    """Rows as a table for people (`table`: two spaces between columns, numbers right-aligned), CSV, or
    another of tabulate's formats."""
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows(rows)
        return buffer.getvalue().rstrip("\n")
    if fmt != "table":
        return tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True)
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    filled = [[row[i] for row in cells[1:] if row[i] not in ("", "-")] for i in range(len(headers))]
    right = [bool(column) and all(_NUMBER.match(cell) for cell in column) for column in filled]

    def line(row: list[str]) -> str:
        return "  ".join(cell.rjust(w) if r else cell.ljust(w) for cell, w, r in zip(row, widths, right)).rstrip()
    return "\n".join([line(cells[0]), line(["-" * w for w in widths]), *(line(row) for row in cells[1:])])


def flat_csv(records: list[dict]) -> str:
    """Nested records flattened to CSV columns (a.b for nested keys)."""
    flat = [_flatten(r) for r in records]
    headers = list(dict.fromkeys(k for r in flat for k in r))
    return table(headers, [[r.get(h, "") for h in headers] for r in flat], "csv")


def _flatten(record: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def to_json(doc) -> str:
    return json.dumps(doc, indent=2, default=_json_default, allow_nan=False)


def _json_default(value):
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both coordinates (lower is better)."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front, best = [], math.inf
    for i in order:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def plot_plan(result, path: str) -> None:
    """Mean cost against P90 finish time, the Pareto front and the deadline marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ranked = [r for r in result.ranked if math.isfinite(r.stats.makespan_p90_s)]
    points = [(r.stats.makespan_p90_s / 3600, r.stats.cost_mean) for r in ranked]
    front = set(pareto_front(points))
    fig, ax = plt.subplots(figsize=(9, 6))
    for i, (r, (x, y)) in enumerate(zip(ranked, points)):
        color = "tab:green" if r.meets_target else "tab:red"
        ax.scatter(x, y, c=color, s=60 if i in front else 25, edgecolors="k" if i in front else "none", zorder=3)
        if i in front or r is result.chosen:
            c = r.configured.candidate
            ax.annotate(f"{c.offering.instance} x{c.nodes} {c.policy}", (x, y), fontsize=7,
                        xytext=(4, 4), textcoords="offset points")
    xs = sorted((points[i] for i in front))
    ax.step([p[0] for p in xs], [p[1] for p in xs], where="post", c="k", lw=1, label="Pareto front")
    ax.axvline(result.deadline_s / 3600, c="tab:gray", ls="--", label="deadline")
    if result.chosen is not None:
        ax.scatter([result.chosen.stats.makespan_p90_s / 3600], [result.chosen.stats.cost_mean], marker="*",
                   s=300, c="gold", edgecolors="k", zorder=4, label="chosen")
    ax.set_xlabel("P90 finish time (h)")
    ax.set_ylabel(f"mean cost ({result.ranked[0].configured.candidate.offering.currency})")
    ax.set_title(f"{result.workload.name}: cost vs P90 finish ({result.trials} trials each; "
                 "green meets the target)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def plot_trials(doc: dict, title: str, path: str) -> None:
    """simulate's trials (its summary with `per_trial`): the share finished by each hour (unfinished trials
    never reach 1) with the deadline marked, and the distribution of their costs with P10/P50/P90."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    trials, deadline_h = doc["per_trial"], doc["deadline_h"]
    n = len(trials)
    finished = np.sort([t["makespan_h"] for t in trials if t["makespan_h"] is not None])
    costs = np.sort([t["cost"] for t in trials])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    start = finished[:1] if len(finished) else np.array([0.0])   # the axis from the first finish, not from 0
    left.step(np.concatenate([start, finished]), np.arange(len(finished) + 1) / n, where="post", c="tab:blue")
    left.axvline(deadline_h, c="tab:gray", ls="--", label=f"deadline {deadline_h:g} h")
    met = sum(t["met_deadline"] for t in trials) / n
    left.axhline(met, c="tab:green", ls=":", label=f"met {100 * met:.1f}%")
    left.set_xlabel("finish (h)")
    left.set_ylabel("share of trials finished")
    left.set_ylim(0, 1.02)
    left.legend(loc="best")
    right.hist(costs, bins=min(50, max(10, n // 20)), color="tab:blue", alpha=0.8)
    for q, ls in (("p10", ":"), ("p50", "--"), ("p90", ":")):   # the table's figures
        right.axvline(doc["cost"][q], c="k", ls=ls, lw=1, label=f"{q.upper()} {doc['cost'][q]:,.2f}")
    right.set_xlabel(f"cost ({doc['currency']})" if doc.get("currency") else "cost")
    right.set_ylabel("trials")
    right.legend()
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def save_figure(fig, path: str) -> None:
    """Save a figure atomically (temporary file in the same folder, then rename)."""
    from costsim.contract.jsonfiles import replacing
    with replacing(path, suffix=Path(path).suffix or ".png") as tmp:   # matplotlib takes the format from it
        fig.savefig(tmp, dpi=120)
