#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine (Debian's slurm-wlm + munge), for the
# Slurm-backend test:  cluster.sh install | up STATE_DIR | down STATE_DIR
# Needs root. Accounting is off, so job states come from squeue and the runs' status.json.
set -euo pipefail
cmd=${1:?usage: cluster.sh install|up STATE_DIR|down STATE_DIR}

install() {
  if command -v slurmctld >/dev/null && command -v munged >/dev/null && command -v sbatch >/dev/null; then
    return 0
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
}

up() {
  local dir=${1:?STATE_DIR}
  mkdir -p "$dir"/{state,spool,log}
  dir=$(cd "$dir" && pwd)
  mkdir -p /run/munge && chown munge:munge /run/munge
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    su -s /bin/sh munge -c /usr/sbin/munged
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  cat > "$dir/slurm.conf" <<CONF
ClusterName=hybridjax
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
MinJobAge=3600
KillWait=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF="$dir/slurm.conf"
  /usr/sbin/slurmctld -f "$dir/slurm.conf"
  /usr/sbin/slurmd -f "$dir/slurm.conf"
  for _ in $(seq 100); do
    sinfo -h -o %t 2>/dev/null | grep -q idle && { echo "SLURM_CONF=$dir/slurm.conf"; return 0; }
    sleep 0.2
  done
  echo "slurm did not come up; see $dir/log" >&2
  return 1
}

down() {
  local dir=${1:?STATE_DIR}
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" /run/munge/munged.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}

case "$cmd" in
  install) install ;;
  up) install; up "${2:-}" ;;
  down) down "${2:-}" ;;
  *) echo "usage: cluster.sh install|up STATE_DIR|down STATE_DIR" >&2; exit 2 ;;
esac
