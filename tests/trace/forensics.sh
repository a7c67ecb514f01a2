#!/bin/sh
# One staged failure (tests/trace/forensics.cpp) among 4 ranks under distcomm-run, every rank's
# flight recorder dumped into a fresh DISTCOMM_DUMP_DIR and its timeline written (DISTCOMM_TIMELINE),
# then distcomm-trace on both: passes when each --expect regular expression (grep -E) matches its
# report.
#   kill, stop, skip, size, lag: the ranks fail by themselves (DISTCOMM_TIMEOUT=5) and dump;
#   hang: rank 2 sleeps outside DistComm while the others wait in a collective; this script sends
#         every rank SIGUSR1, waits for the 4 dumps, then kills the job.
# usage: forensics.sh --scenario S --backend B --program PATH --trace PATH --distcomm-run PATH
#                     [--expect REGEX]...
set -u

usage() {
  echo "usage: forensics.sh --scenario S --backend B --program PATH --trace PATH" \
       "--distcomm-run PATH [--expect REGEX]..." >&2
  exit 2
}
scenario='' backend='' program='' trace='' run=''
nexpect=0
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case $1 in
    --scenario) scenario=$2 ;;
    --backend) backend=$2 ;;
    --program) program=$2 ;;
    --trace) trace=$2 ;;
    --distcomm-run) run=$2 ;;
    --expect) nexpect=$((nexpect + 1)); eval "expect_$nexpect=\$2" ;;
    *) usage ;;
  esac
  shift 2
done
[ -n "$scenario" ] && [ -n "$backend" ] && [ -n "$program" ] && [ -n "$trace" ] &&
  [ -n "$run" ] || usage

# The ranks are found by this private path (pgrep -f), not mistaken for another test's.
work=$(mktemp -d "${TMPDIR:-/tmp}/distcomm-forensics.XXXXXX") || exit 1
trap 'pkill -KILL -f "^$work/" 2>/dev/null; rm -rf "$work"' EXIT
exe=$work/distcomm-test-forensics
case $program in /*) ;; *) program=$PWD/$program ;; esac
ln -s "$program" "$exe"
mkdir "$work/dumps"
export DISTCOMM_DUMP_DIR="$work/dumps" DISTCOMM_BACKEND="$backend" DISTCOMM_TIMEOUT=5
export DISTCOMM_TIMELINE="$work/timeline.%r.json"
log=$work/log

if [ "$scenario" = hang ]; then
  export DISTCOMM_TIMEOUT=60
  "$run" -np 4 --grace 1 --timeout 80 "$exe" --scenario hang --lag 60 >"$log" 2>&1 &
  launcher=$!
  # Once rank 2 sleeps, the others reach the collective it skips within a moment.
  i=0
  until grep -q "hang at iteration" "$log" 2>/dev/null; do
    i=$((i + 1))
    [ $i -le 300 ] || { cat "$log"; echo "FAIL: rank 2 never reached its hang"; exit 1; }
    sleep 0.1
  done
  sleep 2
  pkill -USR1 -f "^$exe" || { echo "FAIL: no rank to signal"; exit 1; }
  i=0
  until [ "$(ls "$work/dumps" | grep -c '\.json$')" -ge 4 ]; do
    i=$((i + 1))
    [ $i -le 200 ] || break
    sleep 0.1
  done
  pkill -KILL -f "^$exe"
  wait "$launcher"
else
  # --grace: longer than DISTCOMM_TIMEOUT and the lag, so each rank fails by itself (they ignore
  # the launcher's SIGTERM); a stopped rank is killed at its end.
  timeout -s KILL 90 "$run" -np 4 --grace 15 --timeout 80 "$exe" --scenario "$scenario" \
    >"$log" 2>&1
fi
echo "--- job (exit $?)"
cat "$log"
echo "--- dumps"
ls "$work/dumps"
echo "--- distcomm-trace"
"$trace" "$work/dumps" --timeline "$work"/timeline.*.json >"$work/report" 2>&1
status=$?
cat "$work/report"
fail=0
[ $status -eq 0 ] || { echo "FAIL: distcomm-trace exited $status"; fail=1; }
i=1
while [ $i -le $nexpect ]; do
  eval "re=\$expect_$i"
  if ! grep -E -q -- "$re" "$work/report"; then
    echo "FAIL: the report does not say: $re"
    fail=1
  fi
  i=$((i + 1))
done
[ $fail -eq 0 ] && echo PASS
exit $fail
