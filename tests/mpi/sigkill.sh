#!/bin/sh
# mpi_sigkill_np3: rank 1 of 3 SIGKILLs itself mid-allreduce (DISTCOMM_MPI_KILL_TEST=1). Passes
# when the job ends with a non-zero status within 60 s and no test process is left behind.
# usage: sigkill.sh MPIEXEC NUMPROC_FLAG TEST_BINARY
mpiexec=$1 np_flag=$2 binary=$3
start=$(date +%s)
DISTCOMM_MPI_KILL_TEST=1 timeout -s KILL 60 "$mpiexec" --allow-run-as-root --oversubscribe \
  --mca btl self,vader --mca btl_vader_single_copy_mechanism none "$np_flag" 3 "$binary"
rc=$?
elapsed=$(($(date +%s) - start))
echo "mpirun exit status $rc after ${elapsed}s"
if [ "$elapsed" -ge 60 ]; then echo "FAIL: the job did not end by itself within 60 s"; exit 1; fi
if [ "$rc" -eq 0 ]; then echo "FAIL: the job ended with status 0 although a rank was killed"; exit 1; fi
name=$(basename "$binary" | cut -c1-15)  # the kernel's 15-character process name
i=0
while pgrep -x "$name" >/dev/null; do
  i=$((i + 1))
  if [ "$i" -ge 20 ]; then echo "FAIL: $name processes left behind"; pgrep -a -x "$name"; exit 1; fi
  sleep 0.5
done
echo "PASS: the job failed in bounded time and left nothing behind"
