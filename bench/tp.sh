#!/usr/bin/env bash
# The tensor-parallel pattern (distcomm-bench --pattern tp): 2 processes repeating an in-place f32
# allreduce of 8-64 KiB, each after a fixed compute on the rank's core. DistComm's shm backend and
# MPI_Allreduce run in the same processes (distcomm-bench-shm --pattern tp --peer mpi, under
# mpirun), PyTorch's gloo (bench/tp_torch.py, Debian's /usr/bin/python3) in the same session;
# rounds interleave them and the table gives medians, in calls per second.
#
#   bench/tp.sh [-B BUILD] [-r ROUNDS] [-c COMPUTE_US] [-n ITERS]
#
# Needs build/bin/distcomm-bench-shm (scripts/test.sh or scripts/demo.sh), mpirun and
# python3-torch. Talks over loopback only.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$here/../build"
rounds=5
compute=20
iters=1000
while getopts "B:r:c:n:h" opt; do
  case "$opt" in
    B) build="$OPTARG" ;;
    r) rounds="$OPTARG" ;;
    c) compute="$OPTARG" ;;
    n) iters="$OPTARG" ;;
    *) sed -n '2,/^set /{/^#/p}' "$0"; exit 2 ;;
  esac
done
sizes=(8192 16384 32768 65536)
samples="$(mktemp)"
trap 'rm -f "$samples"' EXIT
mpi=(mpirun --oversubscribe --mca btl self,vader -np 2)
[ "$(id -u)" = 0 ] && mpi=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2)
for ((r = 1; r <= rounds; r++)); do
  "${mpi[@]}" "$build/bin/distcomm-bench-shm" --pattern tp --compute-us "$compute" --peer mpi \
    -b 8K -e 64K -f 2 -n "$iters" -w 100 |
    awk '/^ +[0-9]+ +[0-9]+ +float/ {print "shm", $1, $10; print "mpi", $1, $14}' >>"$samples"
  /usr/bin/python3 "$here/tp_torch.py" 2 "$compute" "$((iters / 4))" float "${sizes[@]}" \
    >>"$samples"
done
/usr/bin/python3 - "$samples" "$compute" "$rounds" <<'PY'
import collections, statistics, sys
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    who, size, us = line.split()
    t[(who, int(size))].append(float(us))
print(f"# tensor-parallel pattern: 2 processes, f32 sum in place, {sys.argv[2]} us of compute "
      f"before each call, medians of {sys.argv[3]} rounds (us per call; calls/s = 1e6 / us)")
print(f"{'bytes':>7} {'shm us':>8} {'MPI us':>8} {'torch us':>9} {'shm/MPI':>8} {'shm/torch':>9}")
for size in sorted({s for _, s in t}):
    shm, mpi, torch = (statistics.median(t[(w, size)]) for w in ("shm", "mpi", "torch_gloo"))
    print(f"{size:>7} {shm:8.2f} {mpi:8.2f} {torch:9.2f} {mpi / shm:8.2f} {torch / shm:9.2f}")
PY
