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
    fig, ax = plt.subplots(figsize=(9, 6))
    for st in owned:
        ax.plot(grid * 100, [owned_rate(st, u) for u in grid], lw=2, label=f"own: {st.name}")
    colours = [plt.get_cmap("tab10")(i) for i in range(10)]
    for index, (name, rate) in enumerate(comparison.cloud_rate.items()):
        ax.axhline(rate, ls="--", lw=1.2, color=colours[(index + len(owned)) % len(colours)],
                   label=f"{name} ({rate:,.2f})")
    for b in comparison.break_even:
        if b.utilization is not None:
            ax.plot(b.utilization * 100, comparison.cloud_rate[b.versus], "o", c="k", ms=5)
            ax.annotate(f"{100 * b.utilization:.0f}%", (b.utilization * 100, comparison.cloud_rate[b.versus]),
                        fontsize=7, xytext=(3, 3), textcoords="offset points")
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
