#!/usr/bin/env bash
# A one-host Slurm with the partitions `costsim control --backend slurm` drives, or take it down.
#
#   bash scripts/slurm_control_cluster.sh up     # install (Debian packages) if missing, configure, start
#   ACCOUNTING=1 bash scripts/slurm_control_cluster.sh up   # and real accounting: slurmdbd on MariaDB
#   bash scripts/slurm_control_cluster.sh down   # cancel jobs, stop the daemons (and the database)
#   NODES=2 bash scripts/slurm_control_cluster.sh up   # two nodes on this host (two slurmd: -N NAME, own ports)
#
# With NODES=2 the nodes are costsim-n1 and costsim-n2, each with its own slurmd (Debian's slurmd runs
# one per node name with -N), port, spool and log, both at 127.0.0.1 (NodeAddr), 4 CPUs and gpu:4 each:
# a multi-node job is a real gang of two slurmd (srun starts one task on each).
# The node has 4 GPUs as GRES (gpu:4; the devices are stand-ins, /dev/null's major and minor), so jobs
# ask for GPUs as real clusters' jobs do (--gres=gpu:N, --gpus=N) and accounting records them
# (AllocTRES gres/gpu=N). With ACCOUNTING=1, MariaDB (its own data folder, 127.0.0.1:3307) and slurmdbd
# (127.0.0.1) keep job records for `sacct -a -P`: GPU counts need AccountingStorageTRES=gres/gpu, which
# Slurm allows only with slurmdbd (jobcomp/filetxt records no GRES).
#
# Partitions on this one node (as seen preempting on Slurm 22.05: the higher PriorityTier cancels the lower after GraceTime):
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

RUN=/run/costsim-slurm
DB_DATA=/var/lib/costsim-slurm-db
DB_PORT=3307

stop_daemons() {
  # Let jobs end first: daemons stopped under a running job leave its slurmstepd behind.
  if command -v scancel >/dev/null && pgrep -x slurmctld >/dev/null; then
    scancel --full --quiet --user=root 2>/dev/null || true
    for _ in $(seq 30); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 1; done
  fi
  for daemon in slurmctld slurmd slurmdbd; do
    for pid in $(pgrep -x "$daemon" || true); do kill "$pid" 2>/dev/null || true; done
  done
  for _ in $(seq 20); do pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || pgrep -x slurmdbd >/dev/null \
    || break; sleep 0.5; done
  if [ -f "$RUN/mariadb.pid" ]; then   # only the database this script started
    kill "$(cat "$RUN/mariadb.pid")" 2>/dev/null || true
    for _ in $(seq 30); do [ -e "$RUN/mariadb.pid" ] || break; sleep 0.5; done
  fi
}

start_accounting() {
  if ! command -v slurmdbd >/dev/null || ! command -v mariadbd >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmdbd mariadb-server >/dev/null
  fi
  chown mysql "$RUN"
  if [ ! -d "$DB_DATA/mysql" ]; then
    mkdir -p "$DB_DATA" && chown mysql "$DB_DATA"
    mariadb-install-db --user=mysql --datadir="$DB_DATA" --auth-root-authentication-method=socket >/dev/null 2>&1
  fi
  mariadbd --user=mysql --datadir="$DB_DATA" --socket="$RUN/mysql.sock" --pid-file="$RUN/mariadb.pid" \
    --bind-address=127.0.0.1 --port=$DB_PORT >"$RUN/mariadb.log" 2>&1 &
  for _ in $(seq 60); do [ -S "$RUN/mysql.sock" ] && break; sleep 0.5; done
  mariadb -S "$RUN/mysql.sock" -u root -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'costsim-test';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
  cat > /etc/slurm/slurmdbd.conf <<DBD
AuthType=auth/munge
DbdAddr=127.0.0.1
DbdHost=localhost
SlurmUser=root
LogFile=/var/log/slurm/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=costsim-test
DBD
  chmod 600 /etc/slurm/slurmdbd.conf
  slurmdbd
  for _ in $(seq 30); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.5; done
  sacctmgr -i add cluster costsim-test >/dev/null 2>&1 || true
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
NODES=${NODES:-1}
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /etc/munge "$RUN"
for i in 0 1 2 3; do [ -c "$RUN/gpu$i" ] || mknod "$RUN/gpu$i" c 1 3; done   # stand-ins for /dev/nvidiaN
if [ "$NODES" = 1 ]; then
  NAMES=$HOST
  NODE_LINES="NodeName=$HOST CPUs=4 Gres=gpu:4 State=UNKNOWN"
  SLURMD_FILES=""
  echo "NodeName=$HOST Name=gpu File=$RUN/gpu[0-3]" > /etc/slurm/gres.conf
else
  NAMES="costsim-n[1-$NODES]"
  NODE_LINES=""
  : > /etc/slurm/gres.conf
  for n in $(seq "$NODES"); do
    NODE_LINES="$NODE_LINES
NodeName=costsim-n$n NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((17000 + n)) CPUs=4 Gres=gpu:4 State=UNKNOWN"
    echo "NodeName=costsim-n$n Name=gpu File=$RUN/gpu[0-3]" >> /etc/slurm/gres.conf
    mkdir -p "/var/spool/slurmd/costsim-n$n"
  done
  SLURMD_FILES="SlurmdPidFile=$RUN/slurmd-%n.pid"
fi
[ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
chown -R munge:munge /etc/munge /run/munge 2>/dev/null || true
chmod 0400 /etc/munge/munge.key
pgrep -x munged >/dev/null || munged --force
stop_daemons
ACCOUNTING_CONF="JobCompType=jobcomp/filetxt"
if [ "${ACCOUNTING:-0}" = 1 ]; then
  start_accounting
  ACCOUNTING_CONF="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/filetxt"
fi
cat > "$CONF" <<CONF
ClusterName=costsim-test
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd$( [ "$NODES" = 1 ] || echo /%n )
$SLURMD_FILES
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
GresTypes=gpu
$ACCOUNTING_CONF
JobCompLoc=/var/log/slurm/jobcomp.log
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd$( [ "$NODES" = 1 ] || echo -%n ).log
$NODE_LINES
PartitionName=spot Nodes=$NAMES Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL GraceTime=$GRACE
PartitionName=on-demand Nodes=$NAMES MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
PartitionName=reclaim Nodes=$NAMES MaxTime=INFINITE State=UP PriorityTier=100 PreemptMode=OFF
CONF
slurmctld -c
if [ "$NODES" = 1 ]; then
  slurmd -c
else
  for n in $(seq "$NODES"); do slurmd -c -N "costsim-n$n"; done
fi
for _ in $(seq 30); do sinfo -h -o %T 2>/dev/null | grep -qE "idle|mixed" && break; sleep 1; done
sinfo -h -o "%P %a %C %G" | sed 's/^/slurm: partition /'
