"""Tables and the plot of `costsim compare`."""

from __future__ import annotations

from costsim.report import save_figure, table, wrap
from costsim.units import format_duration

HEADERS = ["strategy", "kind", "total cost", "per used GPU-h", "util", "wait P50", "wait P95", "misses", "idle GPU-h"]
LEGEND = ("per used GPU-h: total cost over the GPU-hours of work done; util: the owned GPUs' utilisation; wait: "
          "hours a job waited for capacity (median, 95th percentile); misses: jobs that ended past their deadline, of "
          "all jobs; idle GPU-h: GPU-hours paid for while idle.")


def _pct(value) -> str:
    return "" if value is None else f"{100 * value:.0f}%"


def strategy_rows(comparison) -> list[list]:
    return [[r.name, r.kind, f"{r.total_cost:,.0f}", f"{r.cost_per_used_gpu_hour:,.2f}", _pct(r.utilization),
             f"{d['wait_p50_h']:.2f}", f"{d['wait_p95_h']:.2f}", f"{r.deadline_misses}/{r.jobs}" if r.jobs else "",
             f"{r.idle_paid_gpu_hours:,.0f}"] for r in comparison.results for d in [r.as_dict()]]


def break_even_rows(comparison) -> list[list]:
    return [[b.owned, b.versus, f"{comparison.cloud_rate[b.versus]:,.2f}",
             "never" if b.utilization is None else _pct(b.utilization)] for b in comparison.break_even]


def render(comparison, fmt: str) -> str:
    s = comparison.scenario
    head = (f"{s.name}: {s.description}\n{format_duration(s.horizon_s)} horizon, money in {s.currency}; "
            + (f"{comparison.jobs} jobs simulated" if s.sources else "stated utilisation, no simulated demand"))
    strategies = table(HEADERS, strategy_rows(comparison), fmt)
    breaks = table(["owned", "versus", f"cloud {s.currency}/used GPU-h", "break-even utilisation"],
                   break_even_rows(comparison), fmt)
    notes = "\n".join(s.notes)
    legend = wrap(LEGEND) if fmt == "table" else ""
    return "\n\n".join(part for part in (head, strategies + ("\n" + legend if legend else ""), breaks, notes) if part)


def as_json(comparison) -> dict:
    s = comparison.scenario
    return {"currency": s.currency, "scenario": s.name, "horizon_s": s.horizon_s, "jobs": comparison.jobs,
            "strategies": [r.as_dict() for r in comparison.results],
            "break_even": [{"owned": b.owned, "versus": b.versus, "utilization": b.utilization}
                           for b in comparison.break_even],
            "sweep": [{"utilization": u, "cost_per_used_gpu_hour": rates} for u, rates in comparison.sweep.items()]}


def plot(comparison, path: str) -> None:
    """Cost per used GPU-hour against utilisation: owning as a curve, each cloud option as a line."""
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
