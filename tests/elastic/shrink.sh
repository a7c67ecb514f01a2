#!/bin/sh
# Shrink after a lost rank: distcomm-test-shrink (shrink_loop.cpp) with 4 ranks under distcomm-run,
# DISTCOMM_TIMEOUT=5; rank V (--victim, default 2) sends itself SIGKILL or SIGSTOP at iteration 5.
# The job's store lives in distcomm-run, so rank 0 may be the one lost. Passes when
#   - the 3 survivors each say they shrank to the other ranks, renumbered in order, and finished
#     every iteration with the right sums (exit 0);
#   - after SIGSTOP: the victim, continued once the survivors shrank, says it was excluded
#     (excluded_error) instead of joining them;
#   - after SIGKILL: a survivor says the store saw the victim's process end (its held membership
#     went with its store connection), so it did not wait out the shrink window for it; after
#     SIGSTOP none says so (the process lives: the window decides);
#   - the job ends by itself (the outer guard does not fire) and leaves no process behind.
# usage: shrink.sh --backend B --signal KILL|STOP [--victim V] --program PATH --distcomm-run PATH
set -u

usage() {
  echo "usage: shrink.sh --backend B --signal KILL|STOP [--victim V] --program PATH --distcomm-run PATH" >&2
  exit 2
}
backend='' signal='' program='' run='' victim=2
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case $1 in
    --backend) backend=$2 ;;
    --signal) signal=$2 ;;
    --victim) victim=$2 ;;
    --program) program=$2 ;;
    --distcomm-run) run=$2 ;;
    *) usage ;;
  esac
  shift 2
done
[ -n "$backend" ] && [ -n "$signal" ] && [ -n "$program" ] && [ -n "$run" ] || usage

work=$(mktemp -d "${TMPDIR:-/tmp}/distcomm-shrink.XXXXXX") || exit 1
trap 'pkill -KILL -f "^$work/" 2>/dev/null; rm -rf "$work"' EXIT
exe=$work/distcomm-test-shrink
case $program in /*) ;; *) program=$PWD/$program ;; esac
ln -s "$program" "$exe"
log=$work/log
export DISTCOMM_BACKEND="$backend" DISTCOMM_TIMEOUT=5 DISTCOMM_LOG=info

# The survivors linger after the loop so that the continued victim still finds the job's store
# when it asks to rejoin.
linger=0
[ "$signal" = STOP ] && linger=12
timeout -k 5 100 "$run" -np 4 --grace 60 --timeout 90 "$exe" --signal "$signal" \
  --victim "$victim" --linger $linger --release "$work/released" >"$log" 2>&1 &
job=$!
if [ "$signal" = STOP ]; then
  i=0
  until [ "$(grep -c 'shrunk to' "$log")" -ge 3 ]; do
    i=$((i + 1))
    [ $i -le 600 ] || break
    sleep 0.1
  done
  pkill -CONT -f "^$exe"
  i=0
  until grep -q "^rank $victim: excluded" "$log"; do
    i=$((i + 1))
    [ $i -le 150 ] || break
    sleep 0.1
  done
  touch "$work/released"
fi
wait $job
status=$?
cat "$log"
fail=0
say_fail() { echo "FAIL: $*"; fail=1; }
[ $status -ne 124 ] && [ $status -ne 137 -o "$signal" = KILL ] || say_fail "the job did not end by itself (exit $status)"
survivors=''
for r in 0 1 2 3; do
  [ $r -eq "$victim" ] || survivors="$survivors${survivors:+, }$r"
done
new=0
for r in 0 1 2 3; do
  [ $r -ne "$victim" ] || continue
  grep -q "^rank $r: shrunk to rank $new of 3 (ranks $survivors went on)" "$log" ||
    say_fail "rank $r did not shrink to rank $new of ranks $survivors"
  grep -q "^rank $r: finished 30 iterations as rank $new of 3, every sum right" "$log" ||
    say_fail "rank $r did not finish on the survivors"
  new=$((new + 1))
done
gone="shrink: rank $victim is gone (the store saw its process end)"
if [ "$signal" = KILL ]; then
  grep -q "$gone" "$log" || say_fail "no survivor saw rank $victim's process end through the store"
else
  ! grep -q "$gone" "$log" || say_fail "a survivor took the stopped rank $victim for gone"
fi
if [ "$signal" = STOP ]; then
  grep -q "^rank $victim: excluded: shrink: rank $victim was presumed dead" "$log" ||
    say_fail "the continued rank $victim was not told it was presumed dead"
fi
! grep -q "WRONG SUM" "$log" || say_fail "a sum was wrong"
sleep 0.2
if pgrep -f "^$exe" >/dev/null; then
  say_fail "processes of the job are left"
fi
[ $fail -eq 0 ] && echo PASS
exit $fail
