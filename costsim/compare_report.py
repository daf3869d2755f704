"""Tables and the plot of `costsim compare`."""

from __future__ import annotations

from collections import Counter

from costsim.compare import yearly
from costsim.report import save_figure, table, wrap
from costsim.units import format_duration

HEADERS = ["strategy", "kind", "/year", "/used GPU-h", "util", "wait P50/95", "late", "unserved", "idle GPU-h"]
LEGEND = ("/year: the horizon's cost over a year; /used GPU-h: cost over the GPU-hours of work done; util: the owned "
          "GPUs' utilisation; wait: hours a job waited for capacity (median, 95th percentile); late: jobs that ended "
          "past their deadline (a history's jobs have none); unserved: jobs the owned servers can never run (more GPUs "
          "than they have), left out of their cost and work; idle GPU-h: GPU-hours paid for while idle.")


def _pct(value) -> str:
    return "" if value is None else f"{100 * value:.0f}%"


def strategy_rows(comparison) -> list[list]:
    horizon = comparison.scenario.horizon_s
    return [[r.name, r.kind, f"{yearly(r, horizon):,.0f}", f"{r.cost_per_used_gpu_hour:,.2f}", _pct(r.utilization),
             f"{d['wait_p50_h']:.2f}/{d['wait_p95_h']:.2f}", r.deadline_misses, r.unserved if r.kind == "owned" else "",
             f"{r.idle_paid_gpu_hours:,.0f}"]
            for r in comparison.results for d in [r.as_dict()]]


def unserved_notes(comparison) -> list[str]:
    """For each owned fleet that cannot run every job: which jobs, why, and what its figures leave out."""
    notes = []
    fleets = {st.name: st.nodes * st.gpus_per_node for st in comparison.scenario.strategies}
    for r in (r for r in comparison.results if r.unserved):
        work = r.used_gpu_hours + r.unserved_gpu_hours
        sizes = Counter(job.gpus for job in r.unserved_jobs)
        by_size = ", ".join(f"{gpus} GPUs: {n} job{'s' if n > 1 else ''}" for gpus, n in sorted(sizes.items()))
        refs = [job.ref for job in r.unserved_jobs if job.ref]
        named = f"; jobs {', '.join(refs[:8])}{' ...' if len(refs) > 8 else ''}" if refs else ""
        notes.append(f"{r.name} cannot run {r.unserved} of {r.jobs} jobs ({r.unserved_gpu_hours:,.0f} of {work:,.0f} "
                     f"GPU-h, {r.unserved_gpu_hours / work:.0%}): they ask for more GPUs than its {fleets[r.name]} "
                     f"({by_size}{named}). Its cost and break-even count only the jobs it runs; every other row runs "
                     "all of them (a hybrid row sends them to the cloud).")
    return notes


def break_even_rows(comparison, band=None) -> list[list]:
    rows = []
    results = {r.name: r for r in comparison.results}
    for b in comparison.break_even:
        owned = results.get(b.owned)
        runs = f"{owned.jobs - owned.unserved}/{owned.jobs}" if owned is not None and owned.jobs else ""
        row = [b.owned, b.versus, f"{comparison.cloud_rate[b.versus]:,.2f}",
               "never" if b.utilization is None else _pct(b.utilization), runs]
        if band is not None:
            low, high = band.break_even[(b.owned, b.versus)]
            row.append(f"{_pct(low) if low is not None else 'never'} to {_pct(high) if high is not None else 'never'}")
        rows.append(row)
    return rows


def band_rows(comparison, band) -> list[list]:
    horizon = comparison.scenario.horizon_s
    return [[r.name, f"{yearly(r, horizon):,.0f}", f"{band.yearly_cost[r.name][0]:,.0f}",
             f"{band.yearly_cost[r.name][1]:,.0f}"] for r in comparison.results]


def render(comparison, fmt: str, history=None, band=None) -> str:
    s = comparison.scenario
    head = (f"{s.name}: {s.description}\n{format_duration(s.horizon_s)} horizon, money in {s.currency}; "
            + (f"{comparison.jobs} jobs " + ("replayed" if history else "simulated") if s.sources
               else "stated utilisation, no simulated demand"))
    if price_sources(s):
        head += f"\ncloud prices: {'; '.join(price_sources(s))}"
    strategies = table(HEADERS, strategy_rows(comparison), fmt)
    break_headers = ["owned", "versus", f"cloud {s.currency}/used GPU-h", "break-even utilisation", "jobs it runs"]
    breaks = table(break_headers + (["90% band"] if band else []), break_even_rows(comparison, band), fmt)
    notes = "\n".join(s.notes)
    legend = "\n".join(wrap(text) for text in (LEGEND, *unserved_notes(comparison))) if fmt == "table" else ""
    head = "\n".join(wrap(line) for line in head.splitlines()) if fmt == "table" else head
    parts = [head, strategies + ("\n" + legend if legend else ""), breaks]
    if band is not None:
        parts.append(table(["strategy", "cost/year", "5th percentile", "95th percentile"], band_rows(comparison, band), fmt)
                     + (f"\n{wrap(BAND_NOTE.format(draws=band.draws))}" if fmt == "table" else ""))
    return "\n\n".join(part for part in (*parts, notes) if part)


def price_sources(scenario) -> list[str]:
    """Which catalog (and read date) the cloud strategies' prices come from."""
    parts = [st for st in scenario.strategies] + [st.burst for st in scenario.strategies if st.burst is not None]
    return sorted({st.prices for st in parts if st.prices})


BAND_NOTE = ("Band: the comparison over {draws} histories made of this one's weeks drawn with replacement (how much "
             "of the answer is the particular weeks this team had).")


def as_json(comparison, history=None, band=None) -> dict:
    s = comparison.scenario
    doc = {"currency": s.currency, "scenario": s.name, "horizon_s": s.horizon_s, "jobs": comparison.jobs,
           "prices": price_sources(s),
           "strategies": [{**r.as_dict(), "cost_per_year": yearly(r, s.horizon_s)} for r in comparison.results],
           "break_even": [{"owned": b.owned, "versus": b.versus, "utilization": b.utilization,
                           "owned_unserved_jobs": next((r.unserved for r in comparison.results if r.name == b.owned), 0)}
                          for b in comparison.break_even],
           "sweep": [{"utilization": u, "cost_per_used_gpu_hour": rates} for u, rates in comparison.sweep.items()]}
    if history is not None:
        doc["history"] = {"source": history.source, "records": history.records, "jobs": len(history.jobs),
                          "dropped": dict(history.dropped), "merged_runs": history.merged_runs,
                          "span_s": history.span_s, "gpu_hours": sum(j.gpus * j.duration_s for j in history.jobs) / 3600}
    if band is not None:
        doc["band"] = {"draws": band.draws, "quantiles": [0.05, 0.95],
                       "cost_per_year": {name: list(v) for name, v in band.yearly_cost.items()},
                       "break_even": [{"owned": o, "versus": c, "utilization": list(v)}
                                      for (o, c), v in band.break_even.items()]}
    return doc


def plot(comparison, path: str, history=None, band=None) -> None:
    """Cost per used GPU-hour against utilisation (owning a curve, each cloud option a line); with a
    history, its weekly demand against each owned fleet's capacity and every option's cumulative cost."""
    if history is not None:
        _plot_history(comparison, path, history)
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from costsim.compare import owned_rate
    s = comparison.scenario
    owned = [st for st in s.strategies if st.kind == "owned"]
    grid = np.linspace(0.03, 1.0, 200)
    fig, ax = plt.subplots(figsize=(10, 6))
    # Owned options whose cost per used GPU-hour is the same curve (1 or 2 of one server) are one line.
    curves: list[tuple[list[str], list[float]]] = []
    for st in owned:
        ys = [owned_rate(st, u) for u in grid]
        same = next((c for c in curves if np.allclose(c[1], ys, rtol=1e-9)), None)
        if same is not None:
            same[0].append(st.name)
        else:
            curves.append(([st.name], ys))
    colours = [plt.get_cmap("tab10")(i) for i in range(10)]
    for index, (names, ys) in enumerate(curves):
        ax.plot(grid * 100, ys, lw=2.5, color=colours[index % 10], label="own: " + " = ".join(names))
    used = {r.name: r.utilization for r in comparison.results if r.kind == "owned" and r.utilization is not None}
    for name, u in used.items():
        if s.sources:   # simulated demand: where this team's owned GPUs would sit
            ax.axvline(100 * u, color="grey", lw=0.8, ls=":")
            ax.annotate(f"{name}: {100 * u:.0f}% used", (100 * u, 0.98), xycoords=("data", "axes fraction"), fontsize=7,
                        rotation=90, xytext=(2, 0), textcoords="offset points", va="top")
    # Each cloud option: its line, and in the legend its rate and the break-even with owning (no labels on
    # the chart: break-evens a point apart would print over one another).
    for index, (name, rate) in enumerate(comparison.cloud_rate.items()):
        evens = sorted({100 * b.utilization for b in comparison.break_even
                        if b.versus == name and b.utilization is not None})
        labels = sorted({f"{e:.0f}%" for e in evens})
        even = f", break-even {'/'.join(labels)}" if evens else ", owning never pays"
        ax.axhline(rate, ls="--", lw=1.2, color=colours[(index + len(curves)) % 10], label=f"{name}: {rate:,.2f}{even}")
        ax.plot(evens, [rate] * len(evens), "o", c="k", ms=4, zorder=3)
    top = max(list(comparison.cloud_rate.values()) + [owned_rate(st, 0.5) for st in owned]) * 2.5
    ax.set_ylim(0, top)
    ax.set_xlabel("utilisation of the owned GPUs (%)")
    ax.set_ylabel(f"cost per used GPU-hour ({s.currency})")
    ax.set_title(f"{s.name}: owning vs cloud (dots: break-even)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def _plot_history(comparison, path: str, history) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from costsim.fleet.demand import WEEK_S
    s = comparison.scenario
    weeks = max(1, int(np.ceil(s.horizon_s / WEEK_S)))
    demand = np.zeros(weeks)
    for job in history.jobs:   # GPU-hours by the week they ran in (a job spread over its run)
        start, end = job.submit_s, job.submit_s + job.duration_s
        for week in range(int(start // WEEK_S), min(int(end // WEEK_S), weeks - 1) + 1):
            overlap = min(end, (week + 1) * WEEK_S) - max(start, week * WEEK_S)
            demand[week] += job.gpus * max(overlap, 0.0) / 3600.0
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 8))
    top.bar(np.arange(weeks) + 0.5, demand, width=0.8, color="tab:blue", alpha=0.7, label="GPU-hours demanded")
    colours = [plt.get_cmap("tab10")(i) for i in range(1, 10)]
    owned = [st for st in s.strategies if st.kind in ("owned", "hybrid")]
    for index, st in enumerate(dict((st.nodes * st.gpus_per_node, st) for st in owned).values()):
        capacity = st.nodes * st.gpus_per_node * WEEK_S / 3600.0
        top.axhline(capacity, color=colours[index % 9], lw=1.5, label=f"capacity of {st.nodes * st.gpus_per_node} owned "
                    f"GPUs ({capacity:,.0f} GPU-h a week)")
        cheapest = min(comparison.cloud_rate, key=comparison.cloud_rate.get, default=None)
        even = next((b.utilization for b in comparison.break_even if b.versus == cheapest and b.utilization is not None
                     and next(o for o in s.strategies if o.name == b.owned).nodes == st.nodes), None)
        if even is not None:   # the weekly demand at which owning pays against the cheapest cloud option
            top.axhline(even * capacity, color=colours[index % 9], ls=":", lw=1.2,
                        label=f"break-even against {cheapest}, the cheapest cloud option ({100 * even:.0f}% used)")
    top.set_xlabel("week of the history")
    top.set_ylabel("GPU-hours")
    top.set_title(f"{s.name}: weekly demand against owned capacity")
    top.legend(fontsize=7, loc="upper right")
    days = np.linspace(0.0, s.horizon_s, 200)
    for index, result in enumerate(comparison.results):
        spent = [result.spent_by(t) for t in days]
        bottom.plot(days / 86400.0, spent, lw=2.2 if result.kind in ("owned", "hybrid") else 1.2,
                    ls="-" if result.kind in ("owned", "hybrid") else "--", color=plt.get_cmap("tab20")(index % 20),
                    label=f"{result.name}: {spent[-1]:,.0f}")
    cheapest_cloud = min((r for r in comparison.results if r.kind in ("on-demand", "spot")),
                         key=lambda r: r.total_cost, default=None)
    for result in (r for r in comparison.results if r.kind == "owned"):
        if cheapest_cloud is None:
            break
        gap = [result.spent_by(t) - cheapest_cloud.spent_by(t) for t in days]
        crossings = [i for i in range(1, len(days)) if (gap[i - 1] > 0) != (gap[i] > 0)]
        if crossings:   # where owning and the cheapest cloud option have cost the same so far: one legend entry
            # (the lines can weave early on, and labels at each point print over one another)
            when = ", ".join(dict.fromkeys(f"{days[i] / 86400.0:.0f}" for i in crossings))
            bottom.plot([days[i] / 86400.0 for i in crossings], [result.spent_by(days[i]) for i in crossings], "o",
                        color="k", ms=5, zorder=4, label=f"{result.name} = {cheapest_cloud.name} so far: "
                        f"day{'s' if ',' in when else ''} {when}")
    bottom.set_xlabel("days since the first job of the history")
    bottom.set_ylabel(f"cumulative cost ({s.currency})")
    bottom.set_title("cumulative cost (owned: solid; cloud: dashed)")
    bottom.grid(alpha=0.3)
    bottom.legend(fontsize=6, loc="upper left", ncol=2)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
