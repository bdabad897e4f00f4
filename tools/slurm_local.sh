#!/usr/bin/env bash
# A real one-node SLURM on this machine, for trying the cluster path (profiles/slurm, srun + torchrun) before a real
# cluster: Debian's slurm-wlm and munge, one node with this machine's cores and memory, loopback only.
#   tools/slurm_local.sh start     # install what is missing (apt-get, as root), start munged, slurmctld, slurmd
#   tools/slurm_local.sh status    # sinfo / squeue
#   tools/slurm_local.sh stop      # stop the daemons (the config stays)
# It writes /etc/slurm/slurm.conf (the place srun and sbatch look, inside jobs too; a SLURM_CONF set by the caller is
# not passed into jobs by Snakemake's executor) and keeps state, spool and logs in $SLURM_LOCAL_DIR
# (default /tmp/asrlib-slurm). Daemons run as root with proctrack/linuxproc and no cgroups (a container has none),
# and completed jobs stay visible to squeue for MinJobAge=600 s: there is no accounting database, so Snakemake's
# executor is told to use squeue (--slurm-status-command squeue --slurm-no-account).
set -euo pipefail
dir=${SLURM_LOCAL_DIR:-/tmp/asrlib-slurm}
conf=/etc/slurm/slurm.conf

install() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null && return 0
  [ "$(id -u)" = 0 ] || { echo "$0: installing slurm-wlm and munge needs root" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null; }
}

write_conf() {
  local host cpus mem
  host=$(hostname)
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))   # MB, leaving the OS a tenth
  mkdir -p "$dir"/{spool,state,log,run} /etc/slurm
  cat > "$conf" <<EOF
# written by tools/slurm_local.sh: a one-node test cluster on $host, loopback only
ClusterName=asrlib-local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
MinJobAge=600
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SlurmctldPort=6817
SlurmdPort=6818
SlurmdSpoolDir=$dir/spool
StateSaveLocation=$dir/state
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
  install
  write_conf
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  [ -s /etc/munge/munge.key ] || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null;
                                   chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
  pgrep -x munged >/dev/null || /usr/sbin/munged --force
  pgrep -x slurmctld >/dev/null || slurmctld
  pgrep -x slurmd >/dev/null || slurmd
  for _ in $(seq 60); do
    if sinfo -h -o %T 2>/dev/null | grep -qx idle; then sinfo; return 0; fi
    sleep 1
  done
  echo "$0: the node did not become idle in 60 s; see $dir/log/" >&2
  exit 1
}

stop() {
  pkill -x slurmd || true
  pkill -x slurmctld || true
  pkill -x munged || true
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) sinfo; squeue ;;
  *) echo "usage: $0 start|status|stop" >&2; exit 2 ;;
esac
