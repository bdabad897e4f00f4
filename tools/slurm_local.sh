#!/usr/bin/env bash
# A real SLURM cluster of several nodes on this one machine, for running the cluster path (profiles/slurm, the
# Snakefile's srun + torchrun training rule) before a real cluster: Debian's slurm-wlm, slurmdbd and munge, with a
# MariaDB of its own for the accounting database (sacct).
#   tools/slurm_local.sh start     # install what is missing (apt-get, as root), start the daemons, wait for idle nodes
#   tools/slurm_local.sh status    # sinfo, squeue, sacct of the last hour
#   tools/slurm_local.sh stop      # stop the daemons this script started (their pid files); the state stays
# Nodes: SLURM_LOCAL_NODES (default 2) slurmd daemons named node1, node2, ... in Slurm's multiple-slurmd mode (one
# port and spool dir per node, all on 127.0.0.1), each with this machine's cores and memory: a job of
# `--nodes 2 --ntasks-per-node 1` gets two nodes with their own SLURMD_NODENAME, and srun starts one task on each.
# It writes /etc/slurm/slurm.conf and slurmdbd.conf (the places srun, sbatch and sacct look, inside jobs too; a
# SLURM_CONF set by the caller is not passed into jobs by Snakemake's executor) and keeps state, spool, logs and the
# database in $SLURM_LOCAL_DIR (default /tmp/asrlib-slurm). Daemons run as root with proctrack/linuxproc and no
# cgroups (a container has none).
set -euo pipefail
dir=${SLURM_LOCAL_DIR:-/tmp/asrlib-slurm}
nodes=${SLURM_LOCAL_NODES:-2}
conf=/etc/slurm/slurm.conf
dbdconf=/etc/slurm/slurmdbd.conf
cluster=asrlib-local
dbport=3307 # the cluster's own MariaDB, on 127.0.0.1 only
sql=(mariadb --no-defaults -S "$dir/run/mysqld.sock" -uroot)
PACKAGES=(slurm-wlm slurmdbd munge mariadb-server)

install() {
  command -v slurmctld >/dev/null && command -v slurmdbd >/dev/null && command -v munged >/dev/null &&
    command -v mariadbd >/dev/null && return 0
  [ "$(id -u)" = 0 ] || { echo "$0: installing ${PACKAGES[*]} needs root" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq "${PACKAGES[@]}" >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq "${PACKAGES[@]}" >/dev/null; }
}

write_conf() {
  local host cpus mem i
  host=$(hostname)
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))   # MB, leaving the OS a tenth
  mkdir -p "$dir"/{spool,state,log,run} /etc/slurm
  {
    cat <<EOF
# written by tools/slurm_local.sh: a test cluster of $nodes nodes on $host (multiple-slurmd mode), loopback only
ClusterName=$cluster
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
MinJobAge=300
KillWait=10
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819
JobCompType=jobcomp/none
AccountingStoreFlags=job_comment
SchedulerType=sched/backfill
SlurmctldPort=6817
SlurmdSpoolDir=$dir/spool/%n
StateSaveLocation=$dir/state
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
EOF
    for i in $(seq "$nodes"); do
      echo "NodeName=node$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$((6817 + 10 * i)) CPUs=$cpus RealMemory=$mem"
    done
    echo "PartitionName=debug Nodes=node[1-$nodes] Default=YES MaxTime=INFINITE State=UP"
  } > "$conf"
  cat > "$dbdconf" <<EOF
# written by tools/slurm_local.sh
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$dbport
StorageUser=slurm
StoragePass=asrlib-local
StorageLoc=slurm_acct_db
LogFile=$dir/log/slurmdbd.log
PidFile=$dir/run/slurmdbd.pid
EOF
  chmod 600 "$dbdconf"
}

running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for() {  # wait_for SECONDS WHAT COMMAND...: until COMMAND succeeds
  local n=$1 what=$2
  shift 2
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  echo "$0: $what did not come up in $n s; see $dir/log/" >&2
  exit 1
}

start_db() {
  running "$dir/run/mysqld.pid" && return 0
  if [ ! -d "$dir/mysql/mysql" ]; then
    mariadb-install-db --no-defaults --datadir="$dir/mysql" --user=root --auth-root-authentication-method=normal \
      --skip-test-db > "$dir/log/mysql-install.log" 2>&1
  fi
  setsid mariadbd --no-defaults --user=root --datadir="$dir/mysql" --socket="$dir/run/mysqld.sock" \
    --pid-file="$dir/run/mysqld.pid" --port=$dbport --bind-address=127.0.0.1 --skip-name-resolve \
    --innodb-buffer-pool-size=32M --log-error="$dir/log/mysqld.log" < /dev/null > /dev/null 2>&1 &
  wait_for 60 MariaDB "${sql[@]}" -e "SELECT 1"
  "${sql[@]}" -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'asrlib-local';
                  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

start() {
  install
  write_conf
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  [ -s /etc/munge/munge.key ] || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null;
                                   chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
  [ -S /run/munge/munge.socket.2 ] && munge -n < /dev/null > /dev/null 2>&1 || /usr/sbin/munged --force
  start_db
  running "$dir/run/slurmdbd.pid" || slurmdbd
  wait_for 60 slurmdbd sacctmgr -n list cluster
  sacctmgr -n -P list cluster format=cluster | grep -qw "$cluster" || sacctmgr -i add cluster "$cluster" > /dev/null
  sacctmgr -n -P list account format=account | grep -qw asrlib ||
    sacctmgr -i add account asrlib cluster="$cluster" description=test organization=asrlib > /dev/null
  sacctmgr -n -P list user format=user | grep -qw root ||
    sacctmgr -i add user root account=asrlib defaultaccount=asrlib cluster="$cluster" > /dev/null
  running "$dir/run/slurmctld.pid" || slurmctld
  for i in $(seq "$nodes"); do running "$dir/run/slurmd-node$i.pid" || slurmd -N "node$i"; done
  for _ in $(seq 60); do
    if [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" -ge "$nodes" ]; then sinfo -N; return 0; fi
    sleep 1
  done
  echo "$0: the $nodes nodes did not become idle in 60 s; see $dir/log/" >&2
  sinfo -N >&2 || true
  exit 1
}

stop() {
  local f
  for f in "$dir"/run/slurmd-*.pid "$dir/run/slurmctld.pid" "$dir/run/slurmdbd.pid" "$dir/run/mysqld.pid"; do
    running "$f" && kill "$(cat "$f")"
  done
  return 0
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) sinfo -N; squeue; sacct -a -X -S now-1hour -o JobID,JobName%20,State,NodeList,Elapsed ;;
  *) echo "usage: $0 start|status|stop" >&2; exit 2 ;;
esac
