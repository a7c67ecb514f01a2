#!/bin/sh
# Elastic training: distcomm-train-mlp --elastic with 4 ranks under distcomm-run --elastic,
# DISTCOMM_TIMEOUT=5; once rank 0 has reported its 3rd epoch, rank 2 gets SIGKILL or SIGSTOP.
# Passes when
#   - rank 0 says the job shrank ("3 of 4 ranks go on") and reaches its final line;
#   - the 3 survivors' final parameters (--dump-params with %r) are bitwise equal;
#   - the loss keeps falling: the last epoch's is below the 3rd's;
#   - the job ends by itself (a stopped victim is killed once the survivors are done).
# usage: train.sh --backend B --signal KILL|STOP --trainer PATH --distcomm-run PATH
set -u

usage() {
  echo "usage: train.sh --backend B --signal KILL|STOP --trainer PATH --distcomm-run PATH" >&2
  exit 2
}
backend='' signal='' trainer='' run=''
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case $1 in
    --backend) backend=$2 ;;
    --signal) signal=$2 ;;
    --trainer) trainer=$2 ;;
    --distcomm-run) run=$2 ;;
    *) usage ;;
  esac
  shift 2
done
[ -n "$backend" ] && [ -n "$signal" ] && [ -n "$trainer" ] && [ -n "$run" ] || usage

work=$(mktemp -d "${TMPDIR:-/tmp}/distcomm-elastic.XXXXXX") || exit 1
trap 'pkill -KILL -f "^$work/" 2>/dev/null; rm -rf "$work"' EXIT
exe=$work/distcomm-train-mlp
case $trainer in /*) ;; *) trainer=$PWD/$trainer ;; esac
ln -s "$trainer" "$exe"
log=$work/log
export DISTCOMM_BACKEND="$backend" DISTCOMM_TIMEOUT=5

# The pid of the job's rank $1 (its environment says DISTCOMM_RANK).
pid_of_rank() {
  for p in $(pgrep -f "^$exe"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "DISTCOMM_RANK=$1"; then
      echo "$p"
      return 0
    fi
  done
  return 1
}
# Waits up to $2 tenths of a second for the log to match $1.
await() {
  i=0
  until grep -q "$1" "$log" 2>/dev/null; do
    i=$((i + 1))
    [ $i -le "$2" ] || return 1
    sleep 0.1
  done
}

timeout -k 5 110 "$run" -np 4 --elastic --timeout 100 "$exe" --elastic --epochs 12 \
  --samples 8192 --dump-params "$work/params.%r" >"$log" 2>&1 &
job=$!
fail=0
say_fail() { echo "FAIL: $*"; fail=1; }
if await '^epoch   3/' 600 && victim=$(pid_of_rank 2); then
  kill -"$signal" "$victim"
  echo "sent SIG$signal to rank 2 (pid $victim)"
  if [ "$signal" = STOP ]; then
    await '^final:' 900 || say_fail "the survivors did not finish"
    kill -KILL "$victim"
  fi
else
  say_fail "rank 0 never reported its 3rd epoch, or rank 2 was not found"
fi
wait $job
status=$?
cat "$log"
[ $status -ne 124 ] || say_fail "the job did not end by itself"
grep -q "3 of 4 ranks go on" "$log" || say_fail "rank 0 did not say the job shrank to 3 ranks"
grep -q "^final: test accuracy" "$log" || say_fail "rank 0 did not finish"
for r in 0 1 3; do
  [ -f "$work/params.$r" ] || say_fail "rank $r wrote no parameters"
done
if [ -f "$work/params.0" ]; then
  for r in 1 3; do
    cmp -s "$work/params.0" "$work/params.$r" || say_fail "rank $r's parameters differ from rank 0's"
  done
fi
[ ! -f "$work/params.2" ] || say_fail "the lost rank 2 wrote parameters"
third=$(awk '/^epoch   3\// { print $4 }' "$log")
last=$(awk '/^epoch +[0-9]+\/12 / { v = $4 } END { print v }' "$log")
echo "loss: epoch 3 $third, last epoch $last"
if [ -z "$third" ] || [ -z "$last" ] || ! awk -v a="$last" -v b="$third" 'BEGIN { exit !(a < b) }'; then
  say_fail "the loss did not keep falling (epoch 3: '$third', last: '$last')"
fi
[ $fail -eq 0 ] && echo PASS
exit $fail
