#!/usr/bin/env bash
# Start a one-host Slurm cluster on this machine (scripts/slurm_control_cluster.sh), export the tiny plan to a Slurm batch script with
# `costsim export --to slurm`, submit it with sbatch, and check that it finishes with a summary.
# Needs root (it installs Debian's slurmctld/slurmd/munge if missing and writes /etc/slurm).
# Usage: bash scripts/slurm_localhost_check.sh [WORKDIR]
set -euo pipefail
WORK=${1:-$(mktemp -d /tmp/costsim-slurm.XXXXXX)}
mkdir -p "$WORK"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# The same one-host cluster `costsim control --backend slurm` drives: the job lands on its default
# (spot) partition, where nothing reclaims it.
bash "$ROOT/scripts/slurm_control_cluster.sh" up
cd "$WORK"
python3 -m costsim plan --workload tiny --trials 10 --out plan.json > /dev/null 2>&1
python3 -m costsim export plan.json --to slurm --shared-dir "$WORK" --out job.sbatch
JOB=$(sbatch --parsable --chdir "$WORK" --export=ALL,PYTHONPATH="$ROOT" job.sbatch)
echo "submitted Slurm job $JOB"
for _ in $(seq 240); do
  STATE=$(squeue -h -j "$JOB" -o %T 2>/dev/null || true)
  [ -z "$STATE" ] && break
  sleep 1
done
SUMMARY="$WORK/runs/$JOB/summary.json"
cat "$WORK"/tiny-"$JOB".out | grep -v "^runner: step" | tail -5 || true
python3 - "$SUMMARY" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
assert summary["status"] == "done" and summary["final_state_sha256"], summary
print(f"slurm job finished: {summary['steps']} steps, status {summary['status']}, summary at {sys.argv[1]}")
PY
