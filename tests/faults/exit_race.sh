#!/bin/sh
# Jobs whose ranks end at once after their last collective: a rank that is done exits while a
# peer may still be reading its last messages. (Closing a TCP socket that holds unread bytes
# resets the connection, and the reset discards what the peer had not read yet: gloo's closing
# handshake, gloo_state::say_goodbye, keeps that from happening.) --jobs jobs of --np ranks under
# distcomm-run, each --iterations allreduces of 32 KiB (carried in the call check's messages at 3
# ranks, so the job's last message is a large one of the agreement's) in deterministic mode,
# then exit. Passes when every job exits 0 within its guard.
# usage: exit_race.sh --backend B --program PATH --distcomm-run PATH [--jobs N] [--np P]
#                     [--iterations K] [--mib M]
set -u
backend='' program='' distcomm_run='' jobs=20 np=3 iterations=3 mib=0.03125
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "exit_race.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --backend) backend=$2 ;;
    --program) program=$2 ;;
    --distcomm-run) distcomm_run=$2 ;;
    --jobs) jobs=$2 ;;
    --np) np=$2 ;;
    --iterations) iterations=$2 ;;
    --mib) mib=$2 ;;
    *) echo "exit_race.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
if [ -z "$backend" ] || [ -z "$program" ] || [ -z "$distcomm_run" ]; then
  echo "usage: exit_race.sh --backend B --program PATH --distcomm-run PATH [--jobs N] [--np P]" \
       "[--iterations K] [--mib M]" >&2
  exit 2
fi
log=$(mktemp "${TMPDIR:-/tmp}/distcomm-exit-race.XXXXXX") || exit 1
trap 'rm -f "$log"' EXIT
failed=0
job=1
while [ $job -le "$jobs" ]; do
  # --victim -1: nobody fails; every rank exits 0 once its calls are done.
  if ! DISTCOMM_DETERMINISTIC=1 DISTCOMM_TIMEOUT=60 timeout -s KILL 120 "$distcomm_run" -np "$np" \
      "$program" --backend "$backend" --victim -1 --iterations "$iterations" --mib "$mib" \
      >"$log" 2>&1; then
    failed=$((failed + 1))
    echo "job $job of $jobs failed:"
    cat "$log"
  fi
  job=$((job + 1))
done
echo "$backend: $((jobs - failed)) of $jobs jobs of $np ranks ended cleanly"
[ $failed -eq 0 ]
