"""Which drill (window, steps, deadline) the suite can rely on whatever this machine's speed.

The drill tests (tests/test_control.py) assert that the job is reclaimed at least once, runs on both
markets and meets its deadline. Whether that happens depends on how fast the machine runs the tiny job:
a faster one finishes before the first reclaim, a slower one goes on-demand from the start, a much
slower one cannot meet the deadline at all. This replays a drill in the simulator at several step
times, and prints the windows where the assertions hold at every `--fast` step time and the deadline
at the `--slow` one, with the latest finish in wall seconds. Two rigs, as the tests run them:

- local: 600x, both policies, a checkpoint every 2 s of training, 0.05 s saves, a 10 min notice,
  a 2.5 s exit. The suite's choice (window 6, 6,000 steps, 14 h) is one of
      python3 scripts/drill_config.py --steps 6000 --deadline 14h [--windows 0-99]
- slurm: 300x, greedy, the one-host Slurm's 10 s GraceTime (50 min of trace), a 3 s exit (the
  scheduler's poll and the job's teardown), saves as the local rig's. Its choice is one of
      python3 scripts/drill_config.py --rig slurm --steps 10000 --deadline 11h --fast 4.0,4.9,6.7 --slow 9

The run and its as-known replay can part where a decision falls near a capacity change: the runner's
start-up varies from start to start (3.4-4.6 s of wall time, up to 0.8 h of trace at 600x), and a
policy that leaves on-demand a little earlier meets the spot that is still there, or not. The tests
assert the bill within 5% of the replay, so a window also has to be stable: its cost may move by at
most `--cost-tolerance` when every start-up is `--start-spread` shorter or longer.

`--show WINDOW` prints that window's trials.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costsim import policies  # noqa: E402
from costsim.sim.job import JobParams  # noqa: E402
from costsim.sim.market import TraceTimeline  # noqa: E402
from costsim.sim.trial import TrialOutcome, run_trial  # noqa: E402
from costsim.units import parse_duration_s  # noqa: E402
from tests.policy_grid import PRICES, windows  # noqa: E402

START_PER_STEP_MS = 1.5   # wall seconds of a start per ms of step time: 7 s at 4.7 ms (local), 7.3 s at 4.9 (slurm)
# (a machine that runs the job slower starts it slower too); --start gives a fixed one instead (the paced
# tiny-drill job starts in about 4 s whatever its pace)


@dataclass(frozen=True)
class Rig:
    scale: float          # trace seconds per wall second
    notice_s: float       # trace seconds from the reclaim's notice to the loss
    release_s: float      # wall seconds from the decision to stop to the instance's release
    policies: tuple[str, ...]


RIGS = {"local": Rig(scale=600.0, notice_s=600.0, release_s=2.5, policies=("greedy", "uniform-progress")),
        "slurm": Rig(scale=300.0, notice_s=10.0 * 300.0, release_s=3.0, policies=("greedy",))}


def trial(rig: Rig, trace, steps: int, deadline_s: float, step_ms: float, policy: str,
          start_factor: float = 1.0, start_s: float | None = None) -> TrialOutcome:
    scale = rig.scale
    start = start_s if start_s is not None else START_PER_STEP_MS * step_ms
    params = JobParams(work_s=steps * step_ms / 1e3 * scale, deadline_s=deadline_s, checkpoint_interval_s=2.0 * scale,
                       checkpoint_s=0.05 * scale, changeover_s=start * scale * start_factor,
                       notice_s=rig.notice_s, release_s=rig.release_s * scale, horizon_s=4 * deadline_s)
    return run_trial(params, policies.get(policy), TraceTimeline(*trace), PRICES)


def holds(outcome: TrialOutcome) -> bool:
    markets = {stint.market for stint in outcome.record.stints}
    return outcome.met_deadline and outcome.preemptions >= 1 and markets == {"spot", "on-demand"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rig", choices=sorted(RIGS), default="local", help="the drill's figures (see above)")
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--deadline", default="14h")
    parser.add_argument("--windows", default="0-99")
    parser.add_argument("--fast", default="3.5,4.7,5.6,6.5", help="step times (ms) at which all must hold")
    parser.add_argument("--slow", type=float, default=8.5, help="step time (ms) at which the deadline must hold")
    parser.add_argument("--start", type=float, help="wall seconds of a start (default: 1.5 s per ms of step time)")
    parser.add_argument("--start-spread", type=float, default=0.25, help="start-ups this much shorter and longer ...")
    parser.add_argument("--cost-tolerance", type=float, default=0.05, help="... may move the cost by at most this")
    parser.add_argument("--show", type=int, help="print this window's trials")
    args = parser.parse_args()
    deadline_s = parse_duration_s(args.deadline, source="--deadline", field="deadline")
    traces = windows()
    fast = [float(x) for x in args.fast.split(",")]
    rig = RIGS[args.rig]
    if args.show is not None:
        for step_ms in fast + [args.slow]:
            for policy in rig.policies:
                o = trial(rig, traces[args.show], args.steps, deadline_s, step_ms, policy, start_s=args.start)
                stints = ", ".join(f"{s.market} {s.start_s / 3600:.2f}-{s.end_s / 3600:.2f} h" for s in o.record.stints)
                print(f"{step_ms:4.1f} ms {policy:17s} finish {o.makespan_s / 3600:5.2f} h  preemptions "
                      f"{o.preemptions}  {stints}")
        return
    low, _, high = args.windows.partition("-")
    found = []
    for w in range(int(low), int(high or low) + 1):
        outcomes = [trial(rig, traces[w], args.steps, deadline_s, ms, p, start_s=args.start) for ms in fast
                    for p in rig.policies]
        slow = [trial(rig, traces[w], args.steps, deadline_s, args.slow, p, start_s=args.start) for p in rig.policies]
        if not (all(map(holds, outcomes)) and all(o.met_deadline for o in slow)):
            continue
        moved = max(abs(trial(rig, traces[w], args.steps, deadline_s, ms, p, 1.0 + sign * args.start_spread,
                              start_s=args.start).cost / o.cost - 1.0)
                    for ms in fast for p in rig.policies for sign in (-1, 1)
                    for o in [trial(rig, traces[w], args.steps, deadline_s, ms, p, start_s=args.start)])
        if moved <= args.cost_tolerance:
            found.append((w, max(o.makespan_s for o in outcomes) / rig.scale, moved))
    print(f"{len(found)} windows hold at {args.fast} ms (and meet the deadline at {args.slow} ms), their cost within "
          f"{args.cost_tolerance:.0%} with start-ups {args.start_spread:.0%} shorter or longer:")
    for w, wall_s, moved in found:
        print(f"  window {w:4d}  latest finish {wall_s:5.0f} s of wall time, cost moves up to {moved:.1%}")


if __name__ == "__main__":
    main()
