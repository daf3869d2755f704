"""How well do 1- and 2-GPU measurements predict 4 and 8 GPUs? Fit the Pollux model on the small runs,
predict the large ones, then refit on everything and report both errors.

Usage: python scripts/scaling_report.py RUN_ROOT [--fit-max-gpus 2] [--prior PROFILE] [--json]
RUN_ROOT holds run folders (`runner profile`'s gpusK-batchB/, or any `runner execute` run folders).
--prior: the profile whose terms the small fit starts from and pins (default: the one the runs' plan
names); give the profile as it was before these runs were calibrated into it, or the large runs'
answers leak into the prediction.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from costsim import io  # noqa: E402
from costsim.calibrate import load_run, plan_profile  # noqa: E402
from costsim.fit import fit, predict_step_s  # noqa: E402


def report(run_root: Path, fit_max_gpus: int, prior_path: str | None = None, predict: tuple[int, ...] = ()) -> dict:
    runs = [load_run(str(d)) for d in sorted(run_root.iterdir()) if (d / "telemetry.jsonl").exists()]
    if not runs:
        raise SystemExit(f"{run_root}: no run folders with telemetry.jsonl")
    plan = runs[0].plan
    prior = (io.load_profile(prior_path) if prior_path else plan_profile(runs[0])).gpus.get(plan.resources.gpu)
    if prior is None:
        raise SystemExit(f"no prior figures for {plan.resources.gpu} in {plan.profile.path}")
    small = [r.point for r in runs if r.point.gpus <= fit_max_gpus]
    before = fit(small, prior)
    after = fit([r.point for r in runs], prior)
    rows = []
    for run in sorted(runs, key=lambda r: (r.point.gpus, r.point.micro_batch)):
        p = run.point
        rows.append({"gpus": p.gpus, "micro_batch": p.micro_batch, "measured_step_s": p.step_s,
                     "measured_samples_per_s_per_gpu": p.micro_batch * p.accumulation / p.step_s,
                     "predicted_from_small_s": predict_step_s(before.profile, p),
                     "error_from_small": predict_step_s(before.profile, p) / p.step_s - 1,
                     "refit_s": predict_step_s(after.profile, p),
                     "error_refit": predict_step_s(after.profile, p) / p.step_s - 1,
                     "scaling_efficiency": _efficiency(runs, run)})
    measured = {(r["gpus"], r["micro_batch"]) for r in rows}
    batches = sorted({r["micro_batch"] for r in rows})
    template = runs[0].point
    forecast = [{"gpus": k, "micro_batch": m,
                 "predicted_from_small_s": predict_step_s(before.profile, replace(template, gpus=k, micro_batch=m))}
                for k in predict for m in batches if (k, m) not in measured]
    return {"gpu": plan.resources.gpu, "fit_max_gpus": fit_max_gpus, "fitted_small": list(before.fitted),
            "pinned_small": before.pinned, "fitted_all": list(after.fitted), "rows": rows, "forecast": forecast}


def _efficiency(runs, run) -> float | None:
    """samples/s on K GPUs over K x samples/s on 1 GPU at the same per-GPU batch."""
    one = [r for r in runs if r.point.gpus == 1 and r.point.micro_batch == run.point.micro_batch]
    if not one:
        return None
    return one[0].point.step_s / run.point.step_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_root", type=Path)
    parser.add_argument("--fit-max-gpus", type=int, default=2)
    parser.add_argument("--prior", help="profile to start the fit from (default: the runs' plan's profile)")
    parser.add_argument("--predict", default="", help="GPU counts to forecast where nothing was measured, e.g. 4,8")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    predict = tuple(int(k) for k in args.predict.split(",") if k.strip())
    result = report(args.run_root, args.fit_max_gpus, args.prior, predict)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['gpu']}: fitted on <= {args.fit_max_gpus} GPUs ({', '.join(result['fitted_small'])}); "
          f"pinned: {', '.join(result['pinned_small']) or 'none'}")
    print(f"{'GPUs':>4} {'batch':>5} {'measured s':>11} {'samples/s/GPU':>14} {'from small':>11} {'err':>7} "
          f"{'refit':>9} {'err':>7} {'efficiency':>10}")
    for r in result["rows"]:
        eff = "" if r["scaling_efficiency"] is None else f"{r['scaling_efficiency']:.3f}"
        print(f"{r['gpus']:>4} {r['micro_batch']:>5} {r['measured_step_s']:>11.4f} "
              f"{r['measured_samples_per_s_per_gpu']:>14.2f} "
              f"{r['predicted_from_small_s']:>11.4f} {100 * r['error_from_small']:>+6.1f}% {r['refit_s']:>9.4f} "
              f"{100 * r['error_refit']:>+6.1f}% {eff:>10}")
    for r in result["forecast"]:
        print(f"{r['gpus']:>4} {r['micro_batch']:>5} {'-':>11} {'-':>14} {r['predicted_from_small_s']:>11.4f}"
              f"   (forecast: not measured)")


if __name__ == "__main__":
    main()
