#!/usr/bin/env bash
# Start a one-host Slurm cluster on this machine, export the tiny plan to a Slurm batch script with
# `costsim export --to slurm`, submit it with sbatch, and check that it finishes with a summary.
# Needs root (it installs Debian's slurmctld/slurmd/munge if missing and writes /etc/slurm).
# Usage: bash scripts/slurm_localhost_check.sh [WORKDIR]
set -euo pipefail
WORK=${1:-$(mktemp -d /tmp/costsim-slurm.XXXXXX)}
mkdir -p "$WORK"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmd slurmctld slurm-client munge >/dev/null
fi
if [ -f /etc/slurm/slurm.conf ] && ! grep -q "^ClusterName=costsim-test" /etc/slurm/slurm.conf; then
  echo "refusing: /etc/slurm/slurm.conf belongs to another Slurm cluster; run this on a scratch machine" >&2
  exit 2
fi
HOST=$(hostname -s)
CPUS=$(nproc)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /etc/munge
[ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
chown -R munge:munge /etc/munge /run/munge 2>/dev/null || true
chmod 0400 /etc/munge/munge.key
pgrep -x munged >/dev/null || munged --force
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=costsim-test
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobRequeue=1
ReturnToService=2
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$HOST CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
pkill -x slurmctld 2>/dev/null || true; pkill -x slurmd 2>/dev/null || true; sleep 1
slurmctld -c
slurmd -c
for _ in $(seq 30); do sinfo -h -o %T 2>/dev/null | grep -qE "idle|mixed" && break; sleep 1; done
sinfo
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
