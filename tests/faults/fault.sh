#!/bin/sh
# One failure scenario: distcomm-test-fault with 3 ranks (--np) under distcomm-run (gloo, ucx) or
# mpirun (mpi), DISTCOMM_TIMEOUT=10; rank 1 sends itself SIGKILL or SIGSTOP after 20 (--after)
# allreduces (--op: or rounds of a ring of messages, recv or recv_any) of 2 MiB (--mib) (with
# --during MS: MS ms into the next, from a second thread). Passes when
#   - the job ends by itself (the outer `timeout -s KILL` guard did not fire), non-zero, within
#     the deadline plus 5 s of the fault (the survivors return from main: with mpi, a survivor
#     stuck in MPI_Finalize waiting for the stopped rank fails this);
#   - each survivor printed its peer_lost_error or timeout_error line within the deadline plus
#     some slack of the fault; after SIGSTOP, or with --check-names, every such line names
#     rank 1 (a survivor that blames only a healthy rank fails the test).
#     Under mpirun, Open MPI's policy (abort the job when a rank dies or exits non-zero) may end
#     survivors before they report: accepted when mpirun says so, but after SIGSTOP at least one
#     survivor must have reported; a survivor's next call then fails at once;
#   - no process of the job is left (a victim still stopped is killed, and the test fails);
#   - shm: no shared-memory segment of the job's processes is left in /dev/shm.
# usage: fault.sh --backend B --signal KILL|STOP --program PATH [--strategy S] [--np N]
#                 [--during MS] [--op OP] [--mib M] [--after N] [--check-names]
#                 (--distcomm-run PATH | --mpiexec PATH [--np-flag F])
set -u

usage() {
  echo "usage: fault.sh --backend B --signal KILL|STOP --program PATH [--strategy S] [--np N]" \
       "[--during MS] [--op OP] [--mib M] [--after N] [--check-names]" \
       "(--distcomm-run PATH | --mpiexec PATH [--np-flag F])" >&2
  exit 2
}
backend='' signal='' program='' distcomm_run='' mpiexec='' np_flag=-n strategy=ring np=3
check_names='' during='' op=allreduce mib=2 after=20
while [ $# -gt 0 ]; do
  case $1 in
    --check-names) check_names=1; shift; continue ;;
    --backend | --signal | --program | --strategy | --np | --during | --op | --mib | --after | \
      --distcomm-run | --mpiexec | --np-flag)
      [ $# -ge 2 ] || usage ;;
    *) usage ;;
  esac
  case $1 in
    --backend) backend=$2 ;;
    --signal) signal=$2 ;;
    --program) program=$2 ;;
    --strategy) strategy=$2 ;;
    --np) np=$2 ;;
    --during) during=$2 ;;
    --op) op=$2 ;;
    --mib) mib=$2 ;;
    --after) after=$2 ;;
    --distcomm-run) distcomm_run=$2 ;;
    --mpiexec) mpiexec=$2 ;;
    --np-flag) np_flag=$2 ;;
  esac
  shift 2
done
if [ -z "$backend" ] || [ -z "$signal" ] || [ -z "$program" ] ||
   { [ -z "$distcomm_run" ] && [ -z "$mpiexec" ]; }; then
  usage
fi

deadline=10  # DISTCOMM_TIMEOUT
slack=4      # on top of the deadline, for a loaded 2-core machine
grace=20     # distcomm-run --grace: longer than deadline + slack, so survivors can report
guard=90     # only a hung job gets this far
victim=1
survivors=$(awk -v n="$np" -v v=$victim \
  'BEGIN { for (r = 0; r < n; r++) if (r != v) printf "%d ", r }')

# The job's processes are found by this private path (pgrep -f), so that fault tests of other
# backends running at the same time are not mistaken for leftovers of this one.
work=$(mktemp -d "${TMPDIR:-/tmp}/distcomm-fault.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
exe=$work/distcomm-test-fault
case $program in /*) ;; *) program=$PWD/$program ;; esac
ln -s "$program" "$exe"
log=$work/log
fail=0
say_fail() { echo "FAIL: $*"; fail=1; }
now() { date +%s.%N; }
# seconds between two `date +%s.%N` values, one decimal
diff_s() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# true when $1 <= $2 (decimals)
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# --ignore-sigterm: both launchers stop the job at the first failure with SIGTERM; survivors hold
# out so that each reports what its backend saw (SIGKILL after the launcher's grace still ends
# them).
[ "$signal" = STOP ] && check_names=1
set -- --backend "$backend" --strategy "$strategy" --victim $victim --signal "$signal" \
  --after "$after" --op "$op" --mib "$mib" --ignore-sigterm
[ -n "$during" ] && set -- "$@" --during "$during"
start=$(now)
if [ -n "$mpiexec" ]; then
  DISTCOMM_TIMEOUT=$deadline timeout -s KILL $guard "$mpiexec" --allow-run-as-root \
    --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
    "$np_flag" "$np" "$exe" "$@" >"$log" 2>&1
else
  DISTCOMM_TIMEOUT=$deadline timeout -s KILL $guard "$distcomm_run" -np "$np" --grace $grace \
    "$exe" "$@" >"$log" 2>&1
fi
rc=$?
end=$(now)
cat "$log"
echo "---- $backend, $strategy, SIG$signal: exit status $rc after $(diff_s "$start" "$end") s"

if [ "$rc" -eq 137 ] && ! le "$(diff_s "$start" "$end")" $((guard - 1)); then
  say_fail "the job did not end by itself within $guard s"
elif [ "$rc" -eq 0 ]; then
  say_fail "the job ended with status 0 although rank $victim was lost"
fi

fault_at=$(sed -n "s/^rank $victim: sending SIG$signal to itself .*(at \([0-9.]*\))\$/\1/p" "$log")
if [ -z "$fault_at" ]; then
  say_fail "rank $victim never sent itself SIG$signal"
  fault_at=$start
fi
limit=$((deadline + slack))
launcher_abort=''
if [ -n "$mpiexec" ]; then
  launcher_abort=$(grep -E "(mpirun|mpiexec) (noticed that process rank $victim .*exited on \
signal|detected that one or more processes exited with non-zero status)" "$log")
fi
reported=0
for r in $survivors; do
  line=$(grep -E "^rank $r: (timeout_error|peer_lost_error) after [0-9.]+ s in $op \
[0-9]+ \(at [0-9.]+\): " "$log" | head -n 1)
  if [ -z "$line" ]; then
    if [ -n "$launcher_abort" ]; then
      echo "rank $r: ended by mpirun's abort before it reported"
    else
      say_fail "rank $r printed no timeout_error / peer_lost_error line"
    fi
    continue
  fi
  reported=$((reported + 1))
  at=$(echo "$line" | sed 's/^[^(]*(at \([0-9.]*\)).*$/\1/')
  took=$(diff_s "$fault_at" "$at")
  echo "rank $r: $(echo "$line" | cut -d' ' -f3) $took s after the fault"
  le "$took" $limit || say_fail "rank $r reported $took s after the fault (limit $limit s)"
  message=$(echo "$line" | sed 's/^[^)]*): //')
  if [ -n "$check_names" ] && ! echo "$message" | grep -Eq "rank $victim([^0-9]|\$)"; then
    say_fail "rank $r's message does not name the lost rank $victim"
  fi
  # The communicator refuses further calls at once (mpirun may kill the rank in between).
  next=$(sed -n "s/^rank $r: the next $op failed after \([0-9.]*\) s .*/\1/p" "$log")
  if [ -n "$next" ]; then
    le "$next" 1 || say_fail "rank $r: the next $op took $next s to fail"
  elif [ -z "$launcher_abort" ]; then
    say_fail "rank $r: the next $op did not fail at once"
  fi
done
[ "$signal" = STOP ] && [ $reported -eq 0 ] && say_fail "no survivor reported the stopped rank"
took=$(diff_s "$fault_at" "$end")
echo "job ended $took s after the fault"
# Every process, survivors included, must then leave by itself: the survivors' deadline plus the
# launcher's stop (mpirun's SIGKILL follows its SIGTERM after 1 s).
end_limit=$((deadline + 5))
le "$took" $end_limit || say_fail "the job ended $took s after the fault (limit $end_limit s)"

# Nothing of the job may be left (zombies do not count: here PID 1 may never reap them).
i=0
while :; do
  left=''
  for p in $(pgrep -f "$exe"); do
    case $(ps -o stat= -p "$p" 2>/dev/null) in
      Z* | '') ;;
      *) left="$left $p" ;;
    esac
  done
  [ -z "$left" ] && break
  i=$((i + 1))
  if [ $i -ge 20 ]; then
    say_fail "processes left behind:"
    ps -o pid,stat,args -p "${left# }"
    for p in $left; do kill -CONT "$p"; kill -KILL "$p"; done
    break
  fi
  sleep 0.25
done

# The shm backend's segments, named after the process that made them, are all gone: unlinked once
# every rank had mapped them, long before the fault.
if [ "$backend" = shm ]; then
  pids=$(sed -n 's/^rank [0-9]*: pid \([0-9]*\)$/\1/p' "$log" | tr '\n' '|')
  if [ -z "$pids" ]; then
    say_fail "no rank printed its pid"
  else
    leaked=$(ls /dev/shm 2>/dev/null | grep -E "^distcomm-shm\.[0-9]+\.(${pids%|})\.")
    [ -z "$leaked" ] || say_fail "segments left in /dev/shm: $leaked"
    echo "/dev/shm: nothing of pids ${pids%|} left"
  fi
fi

[ $fail -eq 0 ] && echo "PASS: $backend, $strategy, SIG$signal"
exit $fail
