#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying `--executor slurm` and for its tests.
#
#   scripts/slurm-local.sh start    # install (Debian: slurm-wlm, munge) if missing, start
#   scripts/slurm-local.sh status   # sinfo
#   scripts/slurm-local.sh exec CMD # run CMD where the cluster's commands reach it
#   scripts/slurm-local.sh stop     # stop every daemon it started, remove its state
#
#   NODES=2 scripts/slurm-local.sh start   # two nodes, each in a network namespace of its own
#
# Needs root. Everything it writes lives in STATE (default /tmp/scaleprobe-slurm), including
# slurm.conf: point Slurm's commands at it with `export SLURM_CONF=$STATE/slurm.conf` (printed
# by `start`). What a minimal cluster needs, all here: munge (the authentication every Slurm
# daemon and command uses; one shared key), slurmctld (the controller: queue, scheduling),
# slurmd (one per node: starts the jobs), and slurm.conf naming the node with its real CPUs and
# memory and one partition. No accounting database: `sacct` has nothing to say, and
# scaleprobe reads job states from squeue/scontrol instead.
#
# With NODES=N (2 or more) each node is a network namespace (NS-0, NS-1, ...) with an address
# of its own (NET.1, NET.2, ...) on a bridge that lives in a namespace of its own (NS-sw), so
# that a job over two nodes really crosses a network, as on a cluster; nothing is added to the
# machine's own network. Node 0 is also the head node (slurmctld), and the cluster's commands
# (sbatch, squeue, scaleprobe --executor slurm) run in its namespace: `slurm-local.sh exec`.
# The node names resolve inside the namespaces only (/etc/netns/NS-i/hosts, which `ip netns
# exec` would mount over /etc/hosts; see on_node). The nodes share this machine's CPUs and
# memory.
set -euo pipefail
STATE=${STATE:-/tmp/scaleprobe-slurm}
CONF=$STATE/slurm.conf
MUNGE_SOCKET=$STATE/munge/munge.socket.2
PARTITION=${PARTITION:-debug}
NODES=${NODES:-1}
NS=${NS:-spslurm}     # namespace prefix (NODES >= 2)
NET=${NET:-10.215.0}  # their /24 (NODES >= 2)

need_root() { [ "$(id -u)" = 0 ] || { echo "slurm-local: needs root (it starts daemons)" >&2; exit 2; }; }

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    return
  fi
  command -v apt-get >/dev/null || { echo "slurm-local: no apt-get: install slurm-wlm and munge yourself" >&2; exit 2; }
  echo "slurm-local: installing slurm-wlm and munge (Debian packages)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null
}

node_name() { if [ "$NODES" -gt 1 ]; then echo "sp-node$1"; else hostname -s; fi; }

write_conf() {
  local head cpus mem i
  head=$(node_name 0)
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 / NODES ))  # MiB each
  mkdir -p "$STATE/ctld" "$STATE/spool" "$STATE/munge" "$STATE/log"
  local ctl=$head nodes="" names=""
  [ "$NODES" -gt 1 ] && ctl="$(hostname -s)($NET.1)"  # slurmctld runs in node 0's namespace
  for i in $(seq 0 $((NODES - 1))); do
    local addr=""
    [ "$NODES" -gt 1 ] && addr=" NodeAddr=$NET.$((i + 1))"
    nodes+="NodeName=$(node_name "$i")$addr CPUs=$cpus RealMemory=$mem State=UNKNOWN"$'\n'
    names+="${names:+,}$(node_name "$i")"
    mkdir -p "$STATE/spool/$(node_name "$i")"
  done
  cat > "$CONF" <<CONF
ClusterName=scaleprobe
SlurmctldHost=$ctl
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
SlurmctldPort=${SLURMCTLD_PORT:-6817}
SlurmdPort=${SLURMD_PORT:-6818}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
# a job submitted within 3 s (the default) of the last scheduling pass waits for the next:
# a sweep submits its next point as the last one ends
SchedulerParameters=batch_sched_delay=0
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
${nodes}PartitionName=$PARTITION Nodes=$names Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
}

# NODES >= 2: the namespaces, the bridge joining them, and each namespace's /etc/hosts
make_net() {
  local i
  ip netns add "$NS-sw"
  ip -n "$NS-sw" link add br0 type bridge
  ip -n "$NS-sw" link set br0 up
  for i in $(seq 0 $((NODES - 1))); do
    ip netns add "$NS-$i"
    ip -n "$NS-$i" link set lo up
    ip link add "${NS}v$i" netns "$NS-$i" type veth peer name "p$i" netns "$NS-sw"
    ip -n "$NS-sw" link set "p$i" master br0 up
    ip -n "$NS-$i" addr add "$NET.$((i + 1))/24" dev "${NS}v$i"
    ip -n "$NS-$i" link set "${NS}v$i" up
  done
  for i in $(seq 0 $((NODES - 1))); do
    mkdir -p "/etc/netns/$NS-$i"
    { echo "127.0.0.1 localhost"
      for j in $(seq 0 $((NODES - 1))); do echo "$NET.$((j + 1)) $(node_name "$j")"; done
    } > "/etc/netns/$NS-$i/hosts"
  done
}

# run "$@" in node I's namespace (the machine itself for one node): its network, and its
# /etc/hosts mounted in a mount namespace of its own (not `ip netns exec`, which also mounts a
# new /sys and so hides the cgroup file system slurmd looks for)
on_node() {
  local i=$1; shift
  if [ "$NODES" -gt 1 ]; then
    nsenter --net="/run/netns/$NS-$i" unshare --mount --propagation private \
      sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "/etc/netns/$NS-$i/hosts" "$@"
  else
    "$@"
  fi
}

start() {
  need_root
  install
  if [ "$NODES" -gt 1 ] && ip netns list | grep -q "^$NS-"; then
    echo "slurm-local: namespaces $NS-* exist: run stop first (same NS)" >&2; exit 1
  fi
  write_conf
  [ "$NODES" -gt 1 ] && make_net
  if ! pgrep -f "munged.*$MUNGE_SOCKET" >/dev/null; then
    munged --force --socket="$MUNGE_SOCKET" --pid-file="$STATE/munge/munged.pid" \
      --log-file="$STATE/log/munged.log" --seed-file="$STATE/munge/munged.seed"
  fi
  export SLURM_CONF=$CONF
  pgrep -f "slurmctld -f $CONF" >/dev/null || on_node 0 slurmctld -f "$CONF"
  local i
  for i in $(seq 0 $((NODES - 1))); do
    pgrep -f "slurmd -N $(node_name "$i") -f $CONF" >/dev/null ||
      on_node "$i" slurmd -N "$(node_name "$i")" -f "$CONF"
  done
  for _ in $(seq 1 60); do  # the nodes register within seconds
    if [ "$(on_node 0 sinfo -h -N -o "%t" 2>/dev/null | grep -cE "^(idle|mix|alloc)")" -ge "$NODES" ]; then
      echo "slurm-local: up ($NODES node(s)); export SLURM_CONF=$CONF"
      [ "$NODES" -gt 1 ] && echo "slurm-local: the cluster's commands run in namespace $NS-0: $0 exec CMD"
      return 0
    fi
    sleep 0.5
  done
  echo "slurm-local: the nodes did not come up; logs in $STATE/log" >&2
  on_node 0 sinfo >&2 || true
  exit 1
}

stop() {
  export SLURM_CONF=$CONF
  [ -f "$CONF" ] && on_node 0 scancel --quiet --full -u "$(id -un)" 2>/dev/null || true
  # the jobs leave the queue first: a job step whose slurmd is gone waits for it forever
  # (a sweep does not wait for a job that returned to leave the queue)
  for _ in $(seq 1 40); do
    [ -f "$CONF" ] && [ -n "$(on_node 0 squeue -h 2>/dev/null)" ] || break
    sleep 0.25
  done
  for pidfile in "$STATE"/slurmd-*.pid "$STATE/slurmctld.pid" "$STATE/munge/munged.pid"; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  pkill -f "slurmd .*-f $CONF" 2>/dev/null || true
  pkill -f "slurmctld -f $CONF" 2>/dev/null || true
  pkill -f "munged.*$MUNGE_SOCKET" 2>/dev/null || true
  for _ in $(seq 1 20); do
    pgrep -f "slurmd .*-f $CONF|slurmctld -f $CONF|munged.*$MUNGE_SOCKET" >/dev/null || break
    sleep 0.25
  done
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NS-([0-9]+|sw)$"); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns delete "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  rm -rf "$STATE"
  echo "slurm-local: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) SLURM_CONF=$CONF on_node 0 sinfo ;;
  exec) shift; SLURM_CONF=$CONF on_node 0 "$@" ;;
  *) echo "usage: [NODES=N] $0 start|stop|status|exec CMD" >&2; exit 2 ;;
esac
