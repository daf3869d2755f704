"""`costsim control --plot`: the job's progress against trace time, with the market it was on."""

from __future__ import annotations

from pathlib import Path

from costsim.contract.telemetry import read_events
from costsim.control.journal import Journal
from costsim.spec import ON_DEMAND, OWNED, SPOT

COLOURS = {SPOT: "tab:green", ON_DEMAND: "tab:orange", OWNED: "tab:blue"}


def progress_points(journal: Journal, run_dir: Path) -> list[tuple[float, float]]:
    """(trace hours, steps) from rank 0's step events, and each start's resumed step."""
    points = []
    for e in read_events(run_dir):
        if e.get("event") in ("step", "start") and e.get("rank") in (0, None) and "step" in e:
            points.append(((e["t"] - journal.t0) * journal.time_scale / 3600.0, float(e["step"])))
    return points


def plot_run(journal: Journal, run_dir: Path, total_steps: int, out: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from costsim.report import save_figure

    fig, ax = plt.subplots(figsize=(9, 4.5))
    end_h = (journal.end_s or journal.updated_s) / 3600.0
    for outage in journal.outages:
        stop = outage["end_s"] if outage["end_s"] is not None else journal.end_s or journal.updated_s
        ax.axvspan(outage["start_s"] / 3600.0, stop / 3600.0, ymin=0.0, ymax=0.04, color="tab:red", alpha=0.5, lw=0)
    seen = set()
    for instance in journal.instances:
        stop = instance.end_s if instance.end_s is not None else end_h * 3600.0
        label = instance.market if instance.market not in seen else None
        seen.add(instance.market)
        ax.axvspan(instance.start_s / 3600.0, stop / 3600.0, color=COLOURS.get(instance.market, "grey"), alpha=0.18,
                   lw=0, label=label)
    points = progress_points(journal, run_dir)
    if points:
        xs, ys = zip(*points)
        ax.plot(xs, [100.0 * y / total_steps for y in ys], ".", ms=2, color="black", label="progress")
    deadline_h = journal.deadline_s / 3600.0
    ax.axvline(deadline_h, color="tab:red", ls="--", lw=1, label="deadline")
    if journal.policy == "uniform-progress":
        ax.plot([0, deadline_h], [0, 100], color="grey", lw=1, ls=":", label="uniform progress line")
    margins = [(f["t"] / 3600.0, f.get("margin_s") or 0.0) for f in journal.figures]
    if margins:   # the margin each decision kept for what was not known yet (step-time spread, an unseen restart)
        side = ax.twinx()
        xs, ys = zip(*margins)
        side.step(xs, [y / 3600.0 for y in ys], where="post", color="tab:purple", lw=1, label="margin kept (h)")
        side.set_ylabel("margin kept (h)", color="tab:purple")
        side.set_ylim(bottom=0)
        side.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("trace time (h)")
    ax.set_ylabel("steps done (%)")
    ax.set_ylim(0, 105)
    ax.set_xlim(0, max(end_h, deadline_h) * 1.02)
    ax.set_title(f"{journal.policy} on {journal.backend} (red ticks: no spot capacity)")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    save_figure(fig, out)
    plt.close(fig)
