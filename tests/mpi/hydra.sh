#!/bin/sh
# A program built with Open MPI, started by MPICH's launcher (mpiexec.hydra -n 2): Open MPI does
# not read Hydra's PMI, so each process would run as its own one-rank job. The MPI backend must
# refuse with a rendezvous_error naming both world sizes, and the job must end non-zero.
# Exits 77 (reported as skipped) when mpiexec.hydra is not installed (Debian package mpich).
# usage: hydra.sh PROGRAM [MPIEXEC_HYDRA]
set -u
program=${1:?usage: hydra.sh PROGRAM [MPIEXEC_HYDRA]}
hydra=${2:-}
if [ -z "$hydra" ]; then
  hydra=$(command -v mpiexec.hydra || command -v mpirun.mpich || true)
fi
if [ -z "$hydra" ] || [ ! -x "$hydra" ]; then
  echo "SKIP: mpiexec.hydra (MPICH's launcher, Debian package mpich) is not installed"
  exit 77
fi

out=$(timeout -s KILL 60 "$hydra" -n 2 "$program" 2>&1)
rc=$?
echo "$out"
echo "---- $hydra -n 2: exit status $rc"
fail=0
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the job exited 0"
  fail=1
elif [ "$rc" -eq 137 ]; then
  echo "FAIL: the job did not end within 60 s"
  fail=1
fi
expected="rendezvous_error: mpi: MPI_COMM_WORLD has 1 process but the launcher's variables \
(mpich) describe 2 ranks"
if ! printf '%s\n' "$out" | grep -qF "$expected"; then
  echo "FAIL: no line with: $expected"
  fail=1
fi
if printf '%s\n' "$out" | grep -q "sum of the ranks' numbers"; then
  echo "FAIL: a process ran the allreduce in a world of its own"
  fail=1
fi
[ $fail -eq 0 ] && echo "PASS: refused under $hydra"
exit $fail
