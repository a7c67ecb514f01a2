#!/usr/bin/env bash
# slurm_cluster.sh start|stop|status WORKDIR
#
# A private one-node Slurm cluster on loopback, for the launcher tests. Everything it needs lives in
# WORKDIR: a fresh MUNGE key and its own munged (own socket, so the system's MUNGE is never used or
# touched), slurm.conf (free ports, 127.0.0.1 only, no cgroups, no accounting), state, spool, pid
# files and logs. No systemd, no /etc/slurm, no /run/munge needed; runs as root (slurmd must).
#
#   start   starts munged, slurmctld and slurmd, waits until the node is idle (at most
#           LAUNCHER_SLURM_START_TIMEOUT seconds, default 30), writes WORKDIR/env.sh
#           (export SLURM_CONF=...). On failure it prints the logs, stops what it started and
#           exits 1; 77 (skip) when Slurm or MUNGE is not installed or we are not root.
#   stop    cancels the jobs, stops the daemons and every process they left, removes WORKDIR
#           (keeps it when LAUNCHER_KEEP_SLURM_WORKDIR=1).
#   status  prints the daemons and sinfo; exits 0 when the node is up and usable.
#
# With LAUNCHER_SLURM_OWNER_PID=PID at start, a watchdog stops the cluster once PID is gone (or
# after LAUNCHER_SLURM_LIFETIME seconds, when set), so that a test killed outright (ctest's
# timeout) leaves no daemons behind; with LAUNCHER_SLURM_OWNER_TMPDIR=DIR (a parent of WORKDIR)
# it then removes DIR too, the owner's own temporary directory.
#
# Clients use the cluster with SLURM_CONF=WORKDIR/slurm.conf (or `source WORKDIR/env.sh`).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LAUNCHER_LOG_TAG=slurm_cluster
# shellcheck source=tests/launchers/lib.sh
source "$HERE/lib.sh"

START_TIMEOUT="${LAUNCHER_SLURM_START_TIMEOUT:-30}"
MARKER=.distcomm-slurm-cluster

usage() {
  echo "usage: $0 start|stop|status WORKDIR" >&2
  exit 2
}

(($# == 2)) || [[ "${1:-}" == watch && $# == 5 ]] || usage
action="$1"
[[ -n "$2" ]] || usage
workdir="$(mkdir -p "$2" && cd "$2" && pwd)"
conf="$workdir/slurm.conf"
sock="$workdir/munge/munge.socket"
node="$(uname -n)"
node="${node%%.*}" # slurmd finds its node by the short host name

# The daemons this cluster started, by pid file (ours, written at start).
daemon_pids() {
  local d
  for d in slurmd slurmctld munged; do
    [[ -s "$workdir/run/$d.pid" ]] && cat "$workdir/run/$d.pid"
  done
  return 0
}

# watch OWNER_PID OWNER_START LIFETIME: the watchdog's loop (runs in its own session).
watch() {
  local owner="$1" born="$2" lifetime="$3" start=$SECONDS owner_tmp="${LAUNCHER_SLURM_OWNER_TMPDIR:-}"
  while [[ -e "$workdir/$MARKER" ]]; do
    if ! alive "$owner" || [[ "$(stat_field "$owner" 22 2>/dev/null || true)" != "$born" ]]; then
      break
    fi
    if ((lifetime > 0 && SECONDS - start >= lifetime)); then
      note "lifetime of ${lifetime} s is over"
      break
    fi
    sleep 1
  done
  if [[ -e "$workdir/$MARKER" ]]; then
    note "owner $owner is gone or time is up: stopping the cluster in $workdir"
    stop
    if [[ -n "$owner_tmp" && "$workdir" == "$owner_tmp"/* ]] && ! alive "$owner"; then
      rm -rf "$owner_tmp"
    fi
  fi
}

start_watchdog() {
  local owner="$LAUNCHER_SLURM_OWNER_PID" born
  born="$(stat_field "$owner" 22)" || fail "LAUNCHER_SLURM_OWNER_PID=$owner: no such process"
  setsid "$0" watch "$workdir" "$owner" "$born" "${LAUNCHER_SLURM_LIFETIME:-0}" \
    >>"$workdir/log/watchdog.log" 2>&1 </dev/null &
  echo $! >"$workdir/run/watchdog.pid"
}

print_logs() {
  local f
  for f in "$workdir"/log/*; do
    [[ -s "$f" ]] || continue
    echo "----- $f (last 40 lines) -----" >&2
    tail -n 40 "$f" >&2
  done
}

check_prerequisites() {
  local missing=() b
  for b in slurmctld slurmd srun sinfo scontrol scancel; do
    command -v "$b" >/dev/null 2>&1 || missing+=("$b")
  done
  ((${#missing[@]} == 0)) || skip "Slurm is not installed (no ${missing[*]}): apt-get install slurm-wlm"
  for b in munged munge unmunge; do
    command -v "$b" >/dev/null 2>&1 || missing+=("$b")
  done
  ((${#missing[@]} == 0)) || skip "MUNGE is not installed (no ${missing[*]}): apt-get install munge"
  [[ "$(id -u)" == 0 ]] || skip "a private Slurm cluster needs root (slurmd starts jobs as their user)"
}

node_state() {
  SLURM_CONF="$conf" timeout 10 sinfo -h -N -n "$node" -o %T 2>/dev/null | sed -n 1p
}

start_munge() {
  mkdir -p "$workdir/munge-key" "$workdir/munge"
  # munged wants its key private and its socket directory open to all (execute bit).
  chmod 700 "$workdir/munge-key"
  chmod 755 "$workdir" "$workdir/munge"
  if command -v mungekey >/dev/null 2>&1; then
    mungekey --create --bits=1024 --force --keyfile="$workdir/munge-key/munge.key" ||
      fail "mungekey could not create a key"
  else
    dd if=/dev/urandom of="$workdir/munge-key/munge.key" bs=128 count=1 status=none
  fi
  chmod 600 "$workdir/munge-key/munge.key"
  # -F: stays in the foreground so that its pid is ours; setsid: its own session, so that a
  # signal sent to the test's process group does not reach it before stop does.
  setsid munged -F --socket="$sock" --key-file="$workdir/munge-key/munge.key" \
    --pid-file="$workdir/munge/munged.pid" --seed-file="$workdir/munge/munged.seed" \
    --log-file="$workdir/log/munged.log" >>"$workdir/log/munged.log" 2>&1 </dev/null &
  echo $! >"$workdir/run/munged.pid"
  local deadline=$((SECONDS + 10))
  until [[ -S "$sock" ]] && munge -n -S "$sock" 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1; do
    alive "$(cat "$workdir/run/munged.pid")" || { print_logs; fail "munged exited at start"; }
    ((SECONDS < deadline)) || { print_logs; fail "munged did not answer on $sock within 10 s"; }
    sleep 0.2
  done
}

write_conf() {
  local ports cpus_line mem
  mapfile -t ports < <(free_ports 2)
  # The node's real layout, as slurmd sees it (CPUs, sockets, cores, threads); memory below.
  cpus_line="$(slurmd -C 2>/dev/null | sed -n 1p | tr ' ' '\n' |
    grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=' | tr '\n' ' ')" || true
  [[ -n "$cpus_line" ]] || cpus_line="CPUs=$(nproc) "
  mem="$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo 2>/dev/null)" || mem=1000
  [[ -n "$mem" && "$mem" -gt 0 ]] || mem=1000
  : >"$workdir/plugstack.conf" # none of the system's SPANK plugins
  cat >"$conf" <<EOF
# Generated by tests/launchers/slurm_cluster.sh: a private one-node cluster on loopback.
ClusterName=distcomm-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=${ports[0]}
SlurmdPort=${ports[1]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$workdir/state
SlurmdSpoolDir=$workdir/spool
SlurmctldPidFile=$workdir/run/slurmctld.conf.pid
SlurmdPidFile=$workdir/run/slurmd.conf.pid
SlurmctldLogFile=$workdir/log/slurmctld.log
SlurmdLogFile=$workdir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS=$workdir/tmp
PlugStackConfig=$workdir/plugstack.conf
# Containers have no usable cgroups: track processes through /proc, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MailProg=/bin/true
# The configured node layout wins over what slurmd finds, so the node is never drained for it.
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
InactiveLimit=0
KillWait=5
MinJobAge=10
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$node ${cpus_line}RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
  echo "export SLURM_CONF='$conf'" >"$workdir/env.sh"
}

start() {
  check_prerequisites
  if [[ -e "$workdir/$MARKER" ]] && [[ -n "$(daemon_pids)" ]]; then
    fail "$workdir already holds a cluster; stop it first"
  fi
  touch "$workdir/$MARKER"
  mkdir -p "$workdir/state" "$workdir/spool" "$workdir/run" "$workdir/log" "$workdir/tmp"
  start_munge
  write_conf
  # -D: foreground, so the pids are ours; -c: start clean (there is no saved state to recover).
  SLURM_CONF="$conf" setsid slurmctld -D -c -f "$conf" \
    >>"$workdir/log/slurmctld.out" 2>&1 </dev/null &
  echo $! >"$workdir/run/slurmctld.pid"
  SLURM_CONF="$conf" setsid slurmd -D -f "$conf" -N "$node" \
    >>"$workdir/log/slurmd.out" 2>&1 </dev/null &
  echo $! >"$workdir/run/slurmd.pid"

  local deadline=$((SECONDS + START_TIMEOUT)) state="" d
  while :; do
    state="$(node_state || true)"
    case "$state" in
      idle | idle~ | mixed | allocated) break ;;
    esac
    for d in slurmctld slurmd munged; do
      if ! alive "$(cat "$workdir/run/$d.pid")"; then
        print_logs
        stop_daemons
        fail "$d exited during start-up (see its log above)"
      fi
    done
    if ((SECONDS >= deadline)); then
      note "node $node is '${state:-not known}' after ${START_TIMEOUT} s:"
      SLURM_CONF="$conf" timeout 10 scontrol show node "$node" >&2 || true
      print_logs
      stop_daemons
      fail "the Slurm cluster did not come up within ${START_TIMEOUT} s"
    fi
    sleep 0.5
  done
  if [[ -n "${LAUNCHER_SLURM_OWNER_PID:-}" ]]; then start_watchdog; fi
  note "up: node $node is $state; SLURM_CONF=$conf (ctld port $(sed -n 's/^SlurmctldPort=//p' "$conf"))"
}

stop_daemons() {
  local pids=() d p leftovers=() mine=()
  # The watchdog first (unless it is the one stopping us).
  p="$(cat "$workdir/run/watchdog.pid" 2>/dev/null || true)"
  if [[ -n "$p" && "$p" != "$$" && "$p" != "$PPID" ]]; then kill_tree 3 "$p"; fi
  rm -f "$workdir/run/watchdog.pid"
  if [[ -f "$conf" ]] && [[ -n "$(daemon_pids)" ]]; then
    SLURM_CONF="$conf" timeout 10 scancel --quiet --full --user=root >/dev/null 2>&1 || true
  fi
  mapfile -t pids < <(daemon_pids)
  ((${#pids[@]})) || return 0
  # slurmstepd and the job's tasks leave slurmd's process tree (slurmstepd daemonizes into a
  # session of its own). They, srun and the tasks all carry SLURM_CONF=our conf in their
  # environment: collect those, leaving out the daemons' own trees (slurmctld's slurmscriptd goes
  # with slurmctld), this script with its callers (run_under.sh may export SLURM_CONF) and this
  # script's own short-lived children.
  mapfile -t mine < <(
    for p in "${pids[@]}"; do
      echo "$p"
      descendants "$p"
    done
    p=$$
    while [[ -n "$p" && "$p" != 0 ]]; do
      echo "$p"
      p="$(stat_field "$p" 4 2>/dev/null || true)"
    done
  )
  for d in /proc/[0-9]*; do
    p="${d#/proc/}"
    grep -qzxF "SLURM_CONF=$conf" "$d/environ" 2>/dev/null || continue
    [[ " ${mine[*]} " == *" $p "* || "$(stat_field "$p" 4 2>/dev/null || true)" == "$$" ]] ||
      leftovers+=("$p")
  done
  # Tasks and step daemons first, then slurmd, slurmctld and munged last (the others need it to
  # shut down cleanly).
  ((${#leftovers[@]} == 0)) || kill_tree 3 "${leftovers[@]}"
  for d in slurmd slurmctld munged; do
    [[ -s "$workdir/run/$d.pid" ]] || continue
    kill_tree 10 "$(cat "$workdir/run/$d.pid")"
    rm -f "$workdir/run/$d.pid"
  done
}

stop() {
  [[ -e "$workdir/$MARKER" ]] || {
    note "$workdir holds no cluster of ours; nothing to stop"
    return 0
  }
  stop_daemons
  if [[ "${LAUNCHER_KEEP_SLURM_WORKDIR:-0}" == 1 ]]; then
    note "stopped; kept $workdir"
  else
    rm -rf "$workdir"
  fi
}

status() {
  local d p rc=0 state
  [[ -e "$workdir/$MARKER" ]] || {
    echo "no cluster in $workdir"
    return 1
  }
  for d in munged slurmctld slurmd; do
    p="$(cat "$workdir/run/$d.pid" 2>/dev/null || true)"
    if [[ -n "$p" ]] && alive "$p"; then echo "$d: running (pid $p)"; else
      echo "$d: not running"
      rc=1
    fi
  done
  SLURM_CONF="$conf" timeout 10 sinfo -N -l || rc=1
  state="$(node_state || true)"
  case "$state" in idle | idle~ | mixed | allocated | completing) ;; *) rc=1 ;; esac
  echo "SLURM_CONF=$conf"
  return "$rc"
}

case "$action" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  watch) watch "$3" "$4" "$5" ;;
  *) usage ;;
esac
