#!/usr/bin/env bash
# A one-host Slurm with the partitions `costsim control --backend slurm` drives, or take it down.
#
#   bash scripts/slurm_control_cluster.sh up     # install (Debian packages) if missing, configure, start
#   bash scripts/slurm_control_cluster.sh down   # cancel jobs, stop the daemons
#
# Partitions on this one node (what ../shared/reference/SLURM-PREEMPTION.md saw preempt on 22.05):
#   spot       PriorityTier=1,   PreemptMode=CANCEL, GraceTime=$GRACE (the spot notice, seconds)
#   on-demand  PriorityTier=10,  PreemptMode=OFF
#   reclaim    PriorityTier=100, PreemptMode=OFF: drills submit here to take the spot capacity away
# The node declares 4 CPUs whatever it has (SlurmdParameters=config_overrides) so that the sizes below
# make preemption happen (with cons_tres Slurm preempts only when CPUs are short):
#   a spot job asks 2, an on-demand job 1, a reclaim job 3: a reclaim job fits beside an on-demand job
#   but not beside a spot job, which Slurm then preempts; while it runs, no spot job can start.
# Needs root. Refuses a machine whose /etc/slurm/slurm.conf belongs to another cluster.
set -euo pipefail
ACTION=${1:-up}
GRACE=${GRACE:-10}
CONF=/etc/slurm/slurm.conf
if [ -f "$CONF" ] && ! grep -q "^ClusterName=costsim-test" "$CONF"; then
  echo "refusing: $CONF belongs to another Slurm cluster; run this on a scratch machine" >&2
  exit 2
fi
if [ "$(id -u)" != 0 ]; then
  echo "refusing: needs root (it writes $CONF and starts slurmctld, slurmd and munged)" >&2
  exit 2
fi

stop_daemons() {
  # Let jobs end first: daemons stopped under a running job leave its slurmstepd behind.
  if command -v scancel >/dev/null && pgrep -x slurmctld >/dev/null; then
    scancel --full --quiet --user=root 2>/dev/null || true
    for _ in $(seq 30); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 1; done
  fi
  for daemon in slurmctld slurmd; do
    for pid in $(pgrep -x "$daemon" || true); do kill "$pid" 2>/dev/null || true; done
  done
  for _ in $(seq 20); do pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || break; sleep 0.5; done
}

if [ "$ACTION" = down ]; then
  stop_daemons
  echo "slurm: stopped"
  exit 0
fi
[ "$ACTION" = up ] || { echo "usage: $0 up|down" >&2; exit 2; }

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmd slurmctld slurm-client munge >/dev/null
fi
HOST=$(hostname -s)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /etc/munge
[ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
chown -R munge:munge /etc/munge /run/munge 2>/dev/null || true
chmod 0400 /etc/munge/munge.key
pgrep -x munged >/dev/null || munged --force
stop_daemons
cat > "$CONF" <<CONF
ClusterName=costsim-test
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobRequeue=1
ReturnToService=2
KillWait=5
MinJobAge=300
SchedulerParameters=sched_interval=1
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
SlurmctldParameters=preempt_send_user_signal
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$HOST CPUs=4 State=UNKNOWN
PartitionName=spot Nodes=$HOST Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL GraceTime=$GRACE
PartitionName=on-demand Nodes=$HOST MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
PartitionName=reclaim Nodes=$HOST MaxTime=INFINITE State=UP PriorityTier=100 PreemptMode=OFF
CONF
slurmctld -c
slurmd -c
for _ in $(seq 30); do sinfo -h -o %T 2>/dev/null | grep -qE "idle|mixed" && break; sleep 1; done
sinfo -h -o "%P %a %C" | sed 's/^/slurm: partition /'
