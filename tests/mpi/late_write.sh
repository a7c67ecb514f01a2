#!/bin/sh
# Runs late_write.cpp's cases under mpirun -np 2 and checks that both ranks of each say "ok": a
# rank that crashed (a late write into its unmapped buffer is SIGSEGV) or found something wrong
# prints nothing of the kind. mpirun's own status is not used: ranks leave without finalizing MPI
# after a failure, which mpirun reports as exiting improperly.
# usage: late_write.sh PROGRAM MPIRUN [MPIRUN ARGS...]
set -u
program=${1:?usage: late_write.sh PROGRAM MPIRUN [MPIRUN ARGS...]}
shift
fail=0
for case in native receive unmatched; do
  out=$(timeout -s KILL 60 "$@" -np 2 "$program" "$case" 2>&1)
  rc=$?
  echo "$out"
  echo "---- $case: mpirun exit status $rc"
  for rank in 0 1; do
    if ! printf '%s\n' "$out" | grep -q "^late-write $case: rank $rank: ok"; then
      echo "FAIL: $case: rank $rank did not report ok"
      fail=1
    fi
  done
done
exit $fail
