#!/bin/sh
# Elastic training: distcomm-train-mlp --elastic with 4 ranks under distcomm-run --elastic,
# DISTCOMM_TIMEOUT=5; once rank 0 has reported its 3rd epoch, rank V (--victim, default 2) gets
# SIGKILL or SIGSTOP. The job's store lives in distcomm-run, so V may be 0: the survivors' new
# rank 0 carries the job on. With REPLACE, a process started with a live rank's environment must
# be refused; then rank V is killed and, once the job has shrunk, a replacement is started with
# rank V's environment (as a restarted pod would be): it must join the running job.
# Passes when
#   - the job's rank 0 says the job shrank ("3 of 4 ranks go on") and reaches its final line;
#   - the survivors' final parameters (--dump-params with %r) are bitwise equal; with REPLACE,
#     rank 0 says a rank joined ("4 of 4 ranks go on"), and the replacement's are equal too;
#   - the loss keeps falling: the last epoch's is below the 3rd's;
#   - the job ends by itself (a stopped victim is killed once the survivors are done).
# usage: train.sh --backend B --signal KILL|STOP|REPLACE [--victim V] --trainer PATH
#                 --distcomm-run PATH
set -u

usage() {
  echo "usage: train.sh --backend B --signal KILL|STOP|REPLACE [--victim V] --trainer PATH --distcomm-run PATH" >&2
  exit 2
}
backend='' signal='' trainer='' run='' victim=2
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case $1 in
    --backend) backend=$2 ;;
    --signal) signal=$2 ;;
    --victim) victim=$2 ;;
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
# The time now, and the seconds since $1 (for the recovery times the script prints).
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.2f", a - b }'; }
# Waits up to $2 tenths of a second for the log to match $1.
await() {
  i=0
  until grep -q "$1" "$log" 2>/dev/null; do
    i=$((i + 1))
    [ $i -le "$2" ] || return 1
    sleep 0.1
  done
}

set -- --elastic --epochs 12 --samples 8192 --dump-params "$work/params.%r"
timeout -k 5 110 "$run" -np 4 --elastic --timeout 100 "$exe" "$@" >"$log" 2>&1 &
job=$!
fail=0
say_fail() { echo "FAIL: $*"; fail=1; }
survivors=''
for r in 0 1 2 3; do
  [ $r -eq "$victim" ] || survivors="$survivors $r"
done
twin=$(((victim + 1) % 4))  # a live rank a second process is started for (REPLACE)
replacement=''
if await '^epoch   3/' 600 && victim_pid=$(pid_of_rank "$victim"); then
  cp "/proc/$victim_pid/environ" "$work/env.$victim"
  if [ "$signal" = REPLACE ] && twin_pid=$(pid_of_rank $twin); then
    # A process started for a rank that is alive is refused, and the job goes on.
    cp "/proc/$twin_pid/environ" "$work/env.$twin"
    printf '%s\0' "$exe" "$@" >>"$work/env.$twin"
    timeout 30 xargs -0 -a "$work/env.$twin" env -i >"$work/log.$twin" 2>&1
    tstatus=$?
    echo "--- a second process for the live rank $twin (exit status $tstatus):"
    cat "$work/log.$twin"
    grep -q "refused this process: job rank $twin is alive" "$work/log.$twin" ||
      say_fail "a second process for the live rank $twin was not refused"
  fi
  sig=$signal
  [ "$sig" != REPLACE ] || sig=KILL
  kill -"$sig" "$victim_pid"
  lost_at=$(now)
  echo "sent SIG$sig to rank $victim (pid $victim_pid)"
  # Not a check (timing targets live in benchmarks): what bench/elastic/recovery.sh reads.
  await "3 of 4 ranks go on" 300 && echo "recovered in $(since "$lost_at") s"
  if [ "$signal" = STOP ]; then
    await '^final:' 900 || say_fail "the survivors did not finish"
    kill -KILL "$victim_pid"
  elif [ "$signal" = REPLACE ]; then
    if await "3 of 4 ranks go on" 300; then
      # The replacement: rank V's environment and arguments, nothing else.
      printf '%s\0' "$exe" "$@" >>"$work/env.$victim"
      started_at=$(now)
      xargs -0 -a "$work/env.$victim" env -i >"$work/log.$victim" 2>&1 &
      replacement=$!
      echo "started a replacement for rank $victim (pid $replacement)"
      await "1 rank joined" 300 && echo "joined in $(since "$started_at") s"
      survivors="0 1 2 3"
    else
      say_fail "the job did not shrink, so no replacement was started"
    fi
  fi
else
  say_fail "rank 0 never reported its 3rd epoch, or rank $victim was not found"
fi
wait $job
status=$?
cat "$log"
# What the job's rank 0 said: a replacement for rank 0 says the rest in its own output.
said=$work/said
cp "$log" "$said"
if [ -n "$replacement" ]; then
  wait "$replacement"
  rstatus=$?
  echo "--- the replacement's output (exit status $rstatus):"
  cat "$work/log.$victim"
  cat "$work/log.$victim" >>"$said"
  [ $rstatus -eq 0 ] || say_fail "the replacement exited with status $rstatus"
  grep -q "1 rank joined" "$said" || say_fail "no rank said a rank joined"
  grep -q "4 of 4 ranks go on" "$said" || say_fail "no rank said the job grew to 4 ranks"
fi
[ $status -ne 124 ] || say_fail "the job did not end by itself"
grep -q "3 of 4 ranks go on" "$said" || say_fail "rank 0 did not say the job shrank to 3 ranks"
grep -q "^final: test accuracy" "$said" || say_fail "rank 0 did not finish"
first=''
for r in $survivors; do
  [ -f "$work/params.$r" ] || say_fail "rank $r wrote no parameters"
  [ -n "$first" ] || first=$r
done
if [ -f "$work/params.$first" ]; then
  for r in $survivors; do
    cmp -s "$work/params.$first" "$work/params.$r" ||
      say_fail "rank $r's parameters differ from rank $first's"
  done
fi
[ -n "$replacement" ] || [ ! -f "$work/params.$victim" ] ||
  say_fail "the lost rank $victim wrote parameters"
third=$(awk '/^epoch   3\// { print $4 }' "$said")
last=$(awk '/^epoch +[0-9]+\/12 / { v = $4 } END { print v }' "$said")
echo "loss: epoch 3 $third, last epoch $last"
if [ -z "$third" ] || [ -z "$last" ] || ! awk -v a="$last" -v b="$third" 'BEGIN { exit !(a < b) }'; then
  say_fail "the loss did not keep falling (epoch 3: '$third', last: '$last')"
fi
[ $fail -eq 0 ] && echo PASS
exit $fail
