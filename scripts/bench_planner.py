"""Benchmark the planner: model events/s against a bare SimPy loop, and how plan time scales.

Prints, from one run on this machine:
  1. the job model's simulated events per second (SDXL spot trials; the events its stepwise form
     schedules, each checkpoint cycle two) against a bare SimPy loop of timeouts: stepwise, and
     fast-forwarded (runs of whole cycles in one event, the same outcomes), side by side, and the
     two on other configurations (policies, GPUs, intervals);
  2. wall time of `plan` on the SDXL workload as trials and the shortlist grow;
  3. the stability of the chosen plan's P90 makespan and P90 cost: the distribution-free 95%
     confidence interval of each quantile (binomial order statistics) at the default trials, and
     the spread of the P90 over independent seeds;
  4. the H200 spot candidates' trials with each trial's capacity built once for the candidates that draw
     the same (run_many's batches) against once for every candidate (run_trials each), alternating, one process.

Usage: python scripts/bench_planner.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import simpy

from costsim import io
from costsim.catalog import offerings_for
from costsim.montecarlo import batches, quantile, quantile_ci, run_many, run_trials
from costsim.planner import PlanOptions, configure, group_key, plan


def bare_simpy_events_per_s(events: int) -> float:
    """A process that only yields timeouts: the floor of SimPy's cost per event."""
    env = simpy.Environment()

    def loop():
        for _ in range(events):
            yield env.timeout(1.0)
    env.process(loop())
    started = time.perf_counter()
    env.run()
    return events / (time.perf_counter() - started)


def model_rate(config, trials: int, fast_forward: bool) -> tuple[float, int]:
    """Trials per second of the job model, and the SimPy events it scheduled."""
    started = time.perf_counter()
    samples = run_trials(config, trials, seed=1, fast_forward=fast_forward)
    return trials / (time.perf_counter() - started), samples.events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    workload = io.load_workload("sdxl")
    profile = io.load_profile(workload.profile)
    offerings = offerings_for(workload)
    configured, _ = configure(workload, profile, offerings, workload.deadline_s)
    spot = next(c for c in configured if c.candidate.policy == "greedy" and c.candidate.offering.gpu == "H200")

    print("== the job model against bare SimPy (same process, same run, 500 trials each)")
    print("   stepwise: every checkpoint cycle (work, stall) two SimPy events; fast-forward: runs of whole cycles")
    print("   in one (costsim.sim.job.Job._cycles), the same outcomes. Simulated events: the stepwise model's count")
    rates = []
    for _ in range(3 if args.quick else 5):
        step_rate, step_events = model_rate(spot.config, 500, fast_forward=False)
        fast_rate, fast_events = model_rate(spot.config, 500, fast_forward=True)
        bare_rate = bare_simpy_events_per_s(step_events)
        simulated = step_events * fast_rate / 500   # simulated events per second of the fast-forward model
        rates.append((step_events * step_rate / 500 / bare_rate, simulated / bare_rate, fast_rate / step_rate))
        print(f"stepwise {step_rate:>6,.0f} trials/s ({step_events:,} events)   fast-forward {fast_rate:>6,.0f} trials/s "
              f"({fast_events:,} events)   bare SimPy {bare_rate:>10,.0f} ev/s   simulated events/s against it: "
              f"stepwise {rates[-1][0]:.2f}, fast-forward {rates[-1][1]:.2f}")
    print(f"median: simulated events/s against bare SimPy's: stepwise {statistics.median(r[0] for r in rates):.2f}, "
          f"fast-forward {statistics.median(r[1] for r in rates):.2f}; trials/s fast-forward over stepwise "
          f"{statistics.median(r[2] for r in rates):.2f}x")
    print("\n== fast-forward against stepwise on other configurations (1,000 trials each; same mean cost)")
    others = {}
    for c in configured:
        key = (c.candidate.policy, c.candidate.offering.gpu)
        if key in {("spot-only", "H200"), ("greedy", "H100"), ("uniform-progress", "H200"), ("on-demand", "B200")}:
            others.setdefault(key, c)
    for c in others.values():
        rate, events, cost = {}, {}, {}
        for fast_forward in (False, True):
            started = time.perf_counter()
            samples = run_trials(c.config, 1000, seed=5, fast_forward=fast_forward)
            rate[fast_forward] = 1000 / (time.perf_counter() - started)
            events[fast_forward], cost[fast_forward] = samples.events, samples.cost.mean()
        print(f"{c.candidate.label[:64]:64} events {events[False]:>7,} -> {events[True]:>7,}   trials/s "
              f"{rate[False]:6.0f} -> {rate[True]:6.0f} ({rate[True] / rate[False]:.2f}x)   mean cost "
              f"{cost[False]:.4f} / {cost[True]:.4f}")

    print("\n== plan wall time (SDXL; jobs = CPU count)")
    print(f"{'trials':>7} {'shortlist':>9} {'simulated':>9} {'events':>11} {'wall_s':>7}")
    grid = [(100, 8), (400, 8), (400, 16), (1000, 16)] if not args.quick else [(100, 8), (400, 16)]
    for trials, shortlist in grid:
        result = plan(workload, profile, offerings, PlanOptions(trials=trials, shortlist=shortlist))
        print(f"{trials:>7} {shortlist:>9} {len(result.ranked):>9} {result.events:>11,} {result.wall_s:>7.2f}")

    print("\n== stability of the chosen plan's P90 at 400 trials")
    result = plan(workload, profile, offerings, PlanOptions(trials=400))
    chosen = next(c for c in configured if c.candidate == result.chosen.configured.candidate)
    print(f"chosen: {chosen.candidate.label}")
    p90s = []
    for seed in range(5 if args.quick else 10):
        s = run_trials(chosen.config, 400, seed=100 + seed)
        low, high = quantile_ci(s.makespan_s, 0.9)
        clow, chigh = quantile_ci(s.cost, 0.9)
        p90, cost_p90 = quantile(s.makespan_s, 0.9), quantile(s.cost, 0.9)
        p90s.append((p90, cost_p90))
        print(f"seed {100 + seed}: P90 makespan {p90 / 3600:6.2f} h (95% CI {low / 3600:.2f}-{high / 3600:.2f}, "
              f"+-{50 * (high - low) / p90:.1f}%)   P90 cost {cost_p90:7.2f} "
              f"(95% CI +-{50 * (chigh - clow) / cost_p90:.1f}%)")
    makespans = np.array([m for m, _ in p90s])
    costs = np.array([c for _, c in p90s])
    print(f"P90 makespan over seeds: mean {makespans.mean() / 3600:.2f} h, "
          f"relative sd {makespans.std(ddof=1) / makespans.mean():.1%}")
    print(f"P90 cost over seeds:     mean {costs.mean():.2f}, relative sd {costs.std(ddof=1) / costs.mean():.1%}")
    shared_capacity(configured, 400 if args.quick else 1000, 2 if args.quick else 3)


def shared_capacity(configured, trials: int, rounds: int) -> None:
    """Section 4: one interval of every H200 spot group (the policies, runner settings and gang sizes of the
    ensemble's offerings), trials with the capacity built once a batch against once a candidate."""
    one: dict = {}
    for c in configured:
        if c.candidate.offering.gpu == "H200" and c.candidate.policy in ("greedy", "spot-only", "uniform-progress"):
            one.setdefault(group_key(c), c)
    configs = [c.config for c in one.values()]
    print(f"\n== capacity built once for the candidates that draw the same ({len(configs)} H200 spot candidates in "
          f"{len(batches(configs, 1))} batches, {trials} trials each, one process, alternating)")
    ratios = []
    for _ in range(rounds):
        started = time.perf_counter()
        each = [run_trials(config, trials, seed=0) for config in configs]
        alone_s = time.perf_counter() - started
        started = time.perf_counter()
        together = run_many(configs, trials, seed=0, jobs=1)
        shared_s = time.perf_counter() - started
        same = all(np.array_equal(a.cost, b.cost) for a, b in zip(each, together))
        ratios.append(shared_s / alone_s)
        print(f"each candidate its own {alone_s:6.2f} s   shared {shared_s:6.2f} s   ({shared_s / alone_s:.2f}x)   "
              f"the same trials: {same}")
    print(f"median: {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
