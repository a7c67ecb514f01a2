#!/usr/bin/env bash
# Runs a job across N "hosts" on this machine: each host is a network namespace with an address of
# its own on a bridge (10.R.S.h+1/24, eth0) and a UTS namespace with a host name of its own
# (host0, host1, ...), its link shaped with tc netem when asked; the ranks are started in them with
# the variables of a launcher, as that launcher sets them on real hosts. Everything it makes is
# removed on exit, however the job ends.
#
#   netns.sh [--hosts N] [--ranks-per-host R] [--launch torchrun|tf_config] [--rate RATE]
#            [--delay DELAY] [--timeout S] [--env NAME=VALUE]... [--store PATH] [--etcd PATH]
#            [--lose-host H --lose-on REGEX [--recovered-on REGEX [--replace [--joined-on REGEX]]]]
#            -- PROGRAM [ARGS...]
#
#   --hosts N            namespace-hosts (default 2)
#   --ranks-per-host R   ranks started on each (default 2); rank = host * R + local rank
#   --launch torchrun    RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR
#                        (host0's address), MASTER_PORT (default)
#   --launch tf_config   TF_CONFIG of a TFJob: one worker per rank, at its host's address
#   --launch mpirun      Open MPI's mpirun, started on host0 with --host naming every host's
#                        address; it starts its daemon on the other hosts through a launch agent
#                        (in place of ssh) that enters that host's namespaces
#   --rate, --delay      each host's link shaped (e.g. 1gbit, 100us): tbf for a rate alone,
#                        netem with a delay (skipped, 77, where the kernel has no sch_netem)
#   --timeout S          the whole job (default 120): ranks still running are killed, exit 124
#   --env NAME=VALUE     set in every rank (e.g. DISTCOMM_BACKEND=gloo, DISTCOMM_IFACE=eth0);
#                        @SUBNET@ in VALUE becomes the hosts' subnet (10.R.S.0/24), @HOST0@
#                        host0's address
#   --store PATH         the job's store is PATH (distcomm-store), on a host of its own (the
#                        subnet's .250), with a fresh token; the ranks get DISTCOMM_STORE_ADDR
#   --etcd PATH          the job's store is an etcd cluster (PATH: etcd) of one member on each
#                        host, on its address (and on hosts of their own up to 3 members); the
#                        ranks get DISTCOMM_STORE=etcd://.../netns-ID
#   --lose-host H        host H is lost once a rank's output matches --lose-on's REGEX: its link
#                        goes down (its peers hear nothing more), then every process on it is
#                        killed. Its ranks' exit status is not counted. --recovered-on REGEX:
#                        the seconds from the loss until a rank's output matches it are printed
#                        ("netns: recovered in S s"). --replace: then the host comes back and its
#                        ranks are started again as they were first (they must join the running
#                        job and exit 0), or only the first K of them with --replace-ranks K;
#                        --joined-on REGEX: the seconds from their start until a rank's output
#                        matches it ("netns: joined in S s").
#
# Every rank's output is printed after the job, prefixed with its rank. Exit status: 0 when every
# rank exited 0; 77 (ctest's skip) with the reason when namespaces cannot be made (not root, no
# ip or unshare, no permission); else 1, or 124 on the timeout.
set -euo pipefail

hosts=2 per_host=2 launch=torchrun rate='' delay='' timeout_s=120
store='' etcd='' lose_host='' lose_on='' recovered_on='' replace='' replace_ranks='' joined_on=''
envs=()
while (($#)); do
  case "$1" in
    --hosts) hosts="$2"; shift 2 ;;
    --ranks-per-host) per_host="$2"; shift 2 ;;
    --launch) launch="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --delay) delay="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --env) envs+=("$2"); shift 2 ;;
    --store) store="$2"; shift 2 ;;
    --etcd) etcd="$2"; shift 2 ;;
    --lose-host) lose_host="$2"; shift 2 ;;
    --lose-on) lose_on="$2"; shift 2 ;;
    --recovered-on) recovered_on="$2"; shift 2 ;;
    --replace) replace=1; shift ;;
    --replace-ranks) replace=1; replace_ranks="$2"; shift 2 ;;
    --joined-on) joined_on="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
    *) echo "netns.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
(($#)) || { echo "netns.sh: no program given after --" >&2; exit 2; }
[[ "$hosts" =~ ^[1-9][0-9]?$ && "$per_host" =~ ^[1-9][0-9]?$ ]] ||
  { echo "netns.sh: --hosts and --ranks-per-host want 1-99" >&2; exit 2; }
case "$launch" in torchrun|tf_config|mpirun) ;; *) echo "netns.sh: --launch torchrun|tf_config|mpirun" >&2; exit 2 ;; esac
if [[ -n "$lose_host" ]]; then
  [[ "$lose_host" =~ ^[0-9]+$ && "$lose_host" -lt "$hosts" && -n "$lose_on" && "$launch" != mpirun ]] ||
    { echo "netns.sh: --lose-host H wants a host below --hosts, --lose-on REGEX, and no mpirun" >&2; exit 2; }
fi

skip() { echo "skipped: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "network namespaces need root (run as root, or in a container with CAP_NET_ADMIN and CAP_SYS_ADMIN)"
for tool in ip unshare timeout; do
  command -v "$tool" >/dev/null || skip "'$tool' is not installed (iproute2, util-linux, coreutils)"
done
if [[ -n "$rate$delay" ]] && ! command -v tc >/dev/null; then skip "'tc' is not installed (iproute2)"; fi
if [[ "$launch" == mpirun ]]; then
  mpirun=$(command -v mpirun || true)
  [[ -n "$mpirun" && "$("$mpirun" --version 2>&1 || true)" == *"Open MPI"* ]] ||
    skip "Open MPI's mpirun is not installed (apt-get install openmpi-bin)"
fi

# Names unique to this run (interface names are at most 15 characters).
id=$(( $$ % 100000 ))
bridge="dcb$id"
subnet="10.$(( 200 + id / 250 % 50 )).$(( id % 250 ))"
envs=(${envs[@]+"${envs[@]//@SUBNET@/$subnet.0/24}"})
envs=(${envs[@]+"${envs[@]//@HOST0@/$subnet.1}"})
namespaces=()
work=$(mktemp -d "${TMPDIR:-/tmp}/distcomm-netns.XXXXXX")
cleanup() {
  local ns
  for ns in "${namespaces[@]}"; do ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true; done
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

ip link add "$bridge" type bridge 2>/dev/null || skip "cannot make a bridge (ip link add type bridge: no permission?)"
ip link set "$bridge" up
for ((h = 0; h < hosts; h++)); do
  ns="dc$id-host$h"
  ip netns add "$ns" || skip "cannot make a network namespace (ip netns add)"
  namespaces+=("$ns")
  ip link add "dv$id-$h" type veth peer name eth0 netns "$ns"
  ip link set "dv$id-$h" master "$bridge" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$subnet.$((h + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  if [[ -n "$delay" ]]; then
    ip netns exec "$ns" tc qdisc add dev eth0 root netem delay "$delay" ${rate:+rate "$rate"} \
      2>/dev/null || skip "this kernel has no netem queueing discipline (sch_netem): --delay cannot be shaped"
  elif [[ -n "$rate" ]]; then
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 100ms
  fi
done

world=$((hosts * per_host))
master="$subnet.1"
port=$(( 29500 + id % 20000 ))
# A host on the bridge that is not one of the job's (the store's, an etcd member's): "side_host
# NAME ADDRESS" makes the namespace dc<id>-NAME with eth0 at ADDRESS.
side_host() {
  local ns="dc$id-$1"
  ip netns add "$ns"
  namespaces+=("$ns")
  ip link add "dv$id-$1" type veth peer name eth0 netns "$ns"
  ip link set "dv$id-$1" master "$bridge" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$2/24" dev eth0
  ip -n "$ns" link set eth0 up
}
if [[ -n "$store" ]]; then
  # The store's own host: not one of the job's, so that losing any of them leaves it.
  side_host s "$subnet.250"
  ns="dc$id-s"
  token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
  DISTCOMM_AUTH_TOKEN=$token ip netns exec "$ns" "$store" --host "$subnet.250" --port $((port + 1)) \
    --world-size "$world" --job-id "netns-$id" --timeout "$timeout_s" >"$work/store.out" 2>"$work/store.log" &
  envs+=(DISTCOMM_STORE_ADDR="$subnet.250:$((port + 1))" DISTCOMM_JOB_ID="netns-$id"
         DISTCOMM_AUTH_TOKEN="$token")
fi
tf_cluster=''
if [[ "$launch" == tf_config ]]; then
  for ((r = 0; r < world; r++)); do
    tf_cluster+="${tf_cluster:+,}\"$subnet.$((r / per_host + 1)):$((port + r % per_host))\""
  done
fi
echo "netns: $hosts hosts x $per_host ranks on $bridge ($subnet.0/24${rate:+, rate $rate}${delay:+, delay $delay}), $launch"

# A host's namespaces, entered with its host name: "in_host H COMMAND...".
in_host() {
  local h="$1"; shift
  ip netns exec "dc$id-host$h" unshare --uts sh -c 'hostname "$0" && exec "$@"' "host$h" "$@"
}

if [[ "$launch" == mpirun ]]; then
  # The launch agent mpirun runs as "agent HOST COMMAND" where it would run ssh: it enters the
  # namespaces of the host with that address and runs the command in a shell, as sshd would.
  agent="$work/netns-agent"
  cat >"$agent" <<AGENT
#!/bin/sh
host="\$1"; shift
h=\$(( \${host##*.} - 1 ))
exec ip netns exec "dc$id-host\$h" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "host\$h" "\$*"
AGENT
  chmod +x "$agent"
  hostlist=''
  for ((h = 0; h < hosts; h++)); do hostlist+="${hostlist:+,}$subnet.$((h + 1)):$per_host"; done
  xs=()
  for e in ${envs[@]+"${envs[@]}"}; do xs+=(-x "$e"); done
  rc=0
  # oob and btl over the hosts' subnet (eth0); --bind-to none: the hosts share this machine's
  # cores. Session files in our directory.
  in_host 0 env ${envs[@]+"${envs[@]}"} timeout -s KILL "$timeout_s" \
    "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np "$world" --host "$hostlist" \
    --mca plm_rsh_agent "$agent" --mca oob_tcp_if_include "$subnet.0/24" \
    --mca btl self,vader,tcp --mca btl_tcp_if_include "$subnet.0/24" \
    --mca orte_tmpdir_base "$work" --tag-output ${xs[@]+"${xs[@]}"} "$@" || rc=$?
  if ((rc == 137)); then echo "netns: mpirun still running after $timeout_s s, killed"; exit 124; fi
  ((rc == 0)) || { echo "netns: mpirun exited with status $rc"; exit 1; }
  exit 0
fi

if [[ -n "$etcd" ]]; then
  # One etcd member per host, on the host's address: losing a host loses its member too. Under
  # 3 hosts, members on hosts of their own make it 3, so that the loss of one leaves a quorum.
  cport=$((port + 2)) pport=$((port + 3)) cluster='' members=''
  etcd_members=$((hosts < 3 ? 3 : hosts))
  member_address() { if (($1 < hosts)); then echo "$subnet.$(($1 + 1))"; else echo "$subnet.$((240 + $1))"; fi; }
  for ((h = 0; h < etcd_members; h++)); do
    cluster+="${cluster:+,}m$h=http://$(member_address "$h"):$pport"
    members+="${members:+,}$(member_address "$h"):$cport"
  done
  for ((h = 0; h < etcd_members; h++)); do
    a=$(member_address "$h")
    run_in=(in_host "$h")
    if ((h >= hosts)); then
      side_host "e$h" "$a"
      run_in=(ip netns exec "dc$id-e$h")
    fi
    "${run_in[@]}" timeout -s KILL "$timeout_s" "$etcd" --name "m$h" --data-dir "$work/etcd$h" \
      --listen-client-urls "http://$a:$cport" --advertise-client-urls "http://$a:$cport" \
      --listen-peer-urls "http://$a:$pport" --initial-advertise-peer-urls "http://$a:$pport" \
      --initial-cluster "$cluster" --initial-cluster-token "netns-$id" \
      >"$work/etcd$h.log" 2>&1 &
  done
  for ((h = 0; h < etcd_members; h++)); do
    for ((i = 0; i < 300; i++)); do
      grep -q "ready to serve client requests" "$work/etcd$h.log" && break
      sleep 0.1
    done
    grep -q "ready to serve client requests" "$work/etcd$h.log" ||
      { echo "netns: etcd member m$h did not serve within 30 s:"; cat "$work/etcd$h.log"; exit 1; }
  done
  echo "netns: etcd cluster of $etcd_members members: $members"
  envs+=(DISTCOMM_STORE="etcd://$members/netns-$id")
fi

# Starts rank $1 on its host, its output in $2, in the background.
start_rank() {
  local r="$1" h=$(($1 / per_host)) l=$(($1 % per_host)) vars=()
  if [[ "$launch" == torchrun ]]; then
    vars=(RANK=$r WORLD_SIZE=$world LOCAL_RANK=$l LOCAL_WORLD_SIZE=$per_host GROUP_RANK=$h
          MASTER_ADDR="$master" MASTER_PORT=$port)
  else
    vars=("TF_CONFIG={\"cluster\": {\"worker\": [$tf_cluster]}, \"task\": {\"type\": \"worker\", \"index\": $r}}")
  fi
  # A UTS namespace of its own per rank, named after its host: ranks of one host share the name.
  in_host "$h" env "${vars[@]}" ${envs[@]+"${envs[@]}"} timeout -s KILL "$timeout_s" "${program[@]}" \
    >"$2" 2>&1 &
}
program=("$@")
pids=()
for ((r = 0; r < world; r++)); do
  start_rank "$r" "$work/rank$r.log"
  pids+=($!)
done

# "time_until WHAT REGEX SINCE": waits until the ranks' output matches REGEX once more than now,
# then prints "netns: WHAT in S s" (S: seconds since the time SINCE); 1 when it never does.
time_until() {
  local before now j
  before=$(cat "$work"/rank*.log | grep -cE -- "$2" || true)
  for ((j = 0; j < timeout_s * 20; j++)); do
    now=$(cat "$work"/rank*.log | grep -cE -- "$2" || true)
    if ((now > before)); then
      echo "netns: $1 in $(awk -v a="$(date +%s.%N)" -v b="$3" 'BEGIN { printf "%.2f", a - b }') s ('$2' appeared)"
      return 0
    fi
    sleep 0.05
  done
  return 1
}

if [[ -n "$lose_host" ]]; then
  # Watches the ranks' output; once it matches, host $lose_host is lost: link down first (no
  # FIN or RST reaches its peers, as when a machine vanishes), then its processes killed.
  (
    for ((i = 0; i < timeout_s * 10; i++)); do
      if cat "$work"/rank*.log 2>/dev/null | grep -qE -- "$lose_on"; then
        ip link set "dv$id-$lose_host" down
        ip netns pids "dc$id-host$lose_host" | xargs -r kill -KILL 2>/dev/null || true
        lost_at=$(date +%s.%N)
        echo "netns: lost host$lose_host (ranks $((lose_host * per_host))-$((lose_host * per_host + per_host - 1))) once '$lose_on' appeared"
        [[ -n "$recovered_on" ]] || exit 0
        time_until recovered "$recovered_on" "$lost_at" ||
          { echo "netns: '$recovered_on' never appeared after the loss"; exit 0; }
        [[ -n "$replace" ]] || exit 0
        # The host comes back (a replacement machine at the same address) and its ranks are
        # started again as they were first; they must join the running job.
        ip link set "dv$id-$lose_host" up
        back_at=$(date +%s.%N)
        again=()
        for ((r = lose_host * per_host; r < lose_host * per_host + ${replace_ranks:-per_host}; r++)); do
          start_rank "$r" "$work/rank$r.again.log"
          again+=($!)
        done
        echo "netns: host$lose_host is back; its ranks started again"
        [[ -z "$joined_on" ]] || time_until joined "$joined_on" "$back_at" || true
        rc=0
        for p in "${again[@]}"; do wait "$p" || rc=1; done
        ((rc == 0)) || echo "netns: a rank started again on host$lose_host failed"
        exit "$rc"
      fi
      sleep 0.1
    done
  ) &
  watcher=$!
fi

status=0
for ((r = 0; r < world; r++)); do
  rc=0
  wait "${pids[$r]}" || rc=$?
  if [[ -n "$lose_host" ]] && ((r / per_host == lose_host)); then
    continue  # lost with its host (the ranks started again count in the watcher's status)
  fi
  if ((rc == 137)); then
    echo "netns: rank $r still running after $timeout_s s, killed"
    status=124
  elif ((rc != 0)); then
    echo "netns: rank $r exited with status $rc"
    ((status == 124)) || status=1
  fi
done
if [[ -n "$lose_host" ]] && ! wait "$watcher"; then status=1; fi
for ((r = 0; r < world; r++)); do
  sed "s/^/[rank $r] /" "$work/rank$r.log"
  [[ ! -f "$work/rank$r.again.log" ]] || sed "s/^/[rank $r again] /" "$work/rank$r.again.log"
done
[[ -z "$store" ]] || sed 's/^/[store] /' "$work/store.log"
exit $status
