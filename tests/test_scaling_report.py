"""scripts/scaling_report.py on run folders whose step times come from a known Pollux profile."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from costsim import io
from costsim.contract.plan import Checkpoint, Plan, Policy, Prediction, ProfileRef, Resources, Workload
from costsim.fit import Point, predict_step_s

ROOT = Path(__file__).resolve().parent.parent


def fake_run(folder: Path, gpus: int, batch: int, step_s: float, profile_path: str) -> None:
    folder.mkdir(parents=True)
    Plan(workload=Workload(name="w", model="tiny", samples=10**6, global_batch=gpus * batch),
         resources=Resources(gpu="cpu", gpus_per_node=gpus, nodes=1, market="owned", offering="x"),
         policy=Policy(name="owned", deadline_s=1e9), checkpoint=Checkpoint(interval_s=1e9, keep=1, async_=False),
         prediction=Prediction(step_time_s=step_s, samples_per_s=gpus * batch / step_s),
         profile=ProfileRef(path=profile_path)).write(folder / "plan.json")
    events = [{"t": 0.0, "event": "start", "rank": 0, "world_size": gpus, "step": 0}]
    events += [{"t": i * step_s, "event": "step", "rank": 0, "world_size": gpus, "step": i, "step_time_s": step_s}
               for i in range(1, 30)]
    (folder / "telemetry.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")


def test_small_fit_predicts_large_runs_and_refit_matches_them(tmp_path):
    profile = io.load_profile("tiny")
    truth = replace(profile.gpus["cpu"], compute_overhead_s=0.01, compute_per_sample_s=0.002, intra_a_s=0.004,
                    intra_b_s=0.003, overlap_gamma=1.0)
    for gpus in (1, 2, 4, 8):
        for batch in (4, 16):
            step = predict_step_s(truth, Point(gpus, 1, batch, 1, 0.0))
            fake_run(tmp_path / f"gpus{gpus}-batch{batch}", gpus, batch, step, profile.path)
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "scaling_report.py"), str(tmp_path), "--json"],
                         capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    assert "intra_b_s" in result["pinned_small"]          # 1-2 GPUs cannot see the per-GPU network term
    large = [r for r in result["rows"] if r["gpus"] >= 4]
    assert all(r["error_from_small"] < -0.05 for r in large)   # the prior's smaller b_r under-predicts
    assert all(abs(r["error_refit"]) < 1e-3 for r in result["rows"])
    assert result["rows"][0]["scaling_efficiency"] == 1.0
