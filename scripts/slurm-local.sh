#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying `--executor slurm` and for its tests.
#
#   scripts/slurm-local.sh start    # install (Debian: slurm-wlm, munge) if missing, start
#   scripts/slurm-local.sh status   # sinfo
#   scripts/slurm-local.sh stop     # stop every daemon it started, remove its state
#
# Needs root. Everything it writes lives in STATE (default /tmp/scaleprobe-slurm), including
# slurm.conf: point Slurm's commands at it with `export SLURM_CONF=$STATE/slurm.conf` (printed
# by `start`). What a minimal cluster needs, all here: munge (the authentication every Slurm
# daemon and command uses; one shared key), slurmctld (the controller: queue, scheduling),
# slurmd (one per node: starts the jobs), and slurm.conf naming the node with its real CPUs and
# memory and one partition. No accounting database: `sacct` has nothing to say, and
# scaleprobe reads job states from squeue/scontrol instead.
set -euo pipefail
STATE=${STATE:-/tmp/scaleprobe-slurm}
CONF=$STATE/slurm.conf
MUNGE_SOCKET=$STATE/munge/munge.socket.2
PARTITION=${PARTITION:-debug}

need_root() { [ "$(id -u)" = 0 ] || { echo "slurm-local: needs root (it starts daemons)" >&2; exit 2; }; }

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    return
  fi
  command -v apt-get >/dev/null || { echo "slurm-local: no apt-get: install slurm-wlm and munge yourself" >&2; exit 2; }
  echo "slurm-local: installing slurm-wlm and munge (Debian packages)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null
}

write_conf() {
  local node cpus mem
  node=$(hostname -s)
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))  # MiB, 10% kept back
  mkdir -p "$STATE/ctld" "$STATE/spool" "$STATE/munge" "$STATE/log"
  cat > "$CONF" <<CONF
ClusterName=scaleprobe
SlurmctldHost=$node
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldPort=${SLURMCTLD_PORT:-6817}
SlurmdPort=${SLURMD_PORT:-6818}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
KillWait=5
InactiveLimit=0
MinJobAge=600
NodeName=$node CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=$PARTITION Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
}

start() {
  need_root
  install
  write_conf
  if ! pgrep -f "munged.*$MUNGE_SOCKET" >/dev/null; then
    munged --force --socket="$MUNGE_SOCKET" --pid-file="$STATE/munge/munged.pid" \
      --log-file="$STATE/log/munged.log" --seed-file="$STATE/munge/munged.seed"
  fi
  export SLURM_CONF=$CONF
  pgrep -f "slurmctld -f $CONF" >/dev/null || slurmctld -f "$CONF"
  pgrep -f "slurmd -f $CONF" >/dev/null || slurmd -f "$CONF"
  for _ in $(seq 1 60); do  # the node registers within seconds
    if sinfo -h -o "%t" 2>/dev/null | grep -qE "^(idle|mix|alloc)"; then
      echo "slurm-local: up; export SLURM_CONF=$CONF"
      return 0
    fi
    sleep 0.5
  done
  echo "slurm-local: the node did not come up; logs in $STATE/log" >&2
  sinfo >&2 || true
  exit 1
}

stop() {
  export SLURM_CONF=$CONF
  [ -f "$CONF" ] && scancel --quiet --full -u "$(id -un)" 2>/dev/null || true
  for pidfile in "$STATE/slurmd.pid" "$STATE/slurmctld.pid" "$STATE/munge/munged.pid"; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  pkill -f "slurmd -f $CONF" 2>/dev/null || true
  pkill -f "slurmctld -f $CONF" 2>/dev/null || true
  pkill -f "munged.*$MUNGE_SOCKET" 2>/dev/null || true
  for _ in $(seq 1 20); do
    pgrep -f "(slurmd|slurmctld) -f $CONF|munged.*$MUNGE_SOCKET" >/dev/null || break
    sleep 0.25
  done
  rm -rf "$STATE"
  echo "slurm-local: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) SLURM_CONF=$CONF sinfo ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
