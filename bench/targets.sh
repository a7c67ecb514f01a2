#!/usr/bin/env bash
# The small-message and shared-memory figures of docs/PERFORMANCE.md ("Every aim from one run"),
# each with its peer from the same processes and the floor, in one session: 2 processes, f32 sum.
#  * the call check on against off (DISTCOMM_MISMATCH_CHECK), 8 B-64 KiB, on shm, mpi, gloo, ucx;
#  * shm allreduce against MPI_Allreduce and the floor (a cache-line ping-pong), 8 B-128 MiB;
#  * alltoall and alltoallv on mpi against MPI_Alltoall(v), 8 B-16 MiB; shm's alltoall too;
#  * the engine's ResNet-50 step on shm against max(compute, communication) (distcomm-bench-overlap);
#  * the tensor-parallel pattern on shm against MPI and PyTorch's gloo (bench/tp.sh).
# Each round runs every configuration once and the rounds interleave them; the tables give medians.
#
#   bench/targets.sh [-B BUILD] [-o OUT] [-r ROUNDS]
#
#   -B BUILD   build tree with the executables in BUILD/bin (default: build)
#   -o OUT     directory for the samples, logs and targets.md (default: targets)
#   -r ROUNDS  rounds (default: 9)
#
# Needs the bench executables of shm, mpi, gloo and ucx, distcomm-bench-overlap and distcomm-run
# (scripts/test.sh builds them), mpirun, and python3-torch for the PyTorch column. Talks over
# loopback only. About 15 s a round on 2 cores; run it on a quiet machine.
# shellcheck disable=SC2054,SC2094  # "self,vader" is one argument; the log is only appended to
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bench/rounds.sh
source "$here/rounds.sh"
round_options targets.sh targets 9 "$@"
require_built targets.sh distcomm-bench-shm distcomm-bench-mpi distcomm-bench-gloo \
  distcomm-bench-ucx distcomm-bench-overlap distcomm-run
command -v mpirun >/dev/null || { echo "targets.sh: mpirun not found (openmpi-bin)" >&2; exit 2; }
mkdir -p "$out"
samples="$out/samples.txt"
log="$out/log.txt"
: >"$samples"
: >"$log"
mpi=(mpirun --oversubscribe --mca btl self,vader -np 2)
[ "$(id -u)" = 0 ] && mpi=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2)

# One sweep: what, check (1/0), then the command. Rows of the bench's table become
# "what check bytes ours peer floor" in the samples (peer and floor 0 where not measured).
sweep() {
  local what="$1" check="$2"
  shift 2
  echo "== round $round: $what, check $check: $*" >>"$log"
  DISTCOMM_MISMATCH_CHECK="$check" timeout 600 "$@" 2>>"$log" | tee -a "$log" |
    awk -v w="$what" -v c="$check" '/^ +[0-9]+ +[0-9]+ +[a-z0-9]+ +[a-z]+ / {
      peer = (NF >= 14) ? $14 : 0; floor = (NF >= 20) ? $19 : 0
      print w, c, $1, $6, peer, floor }' >>"$samples"
}

for ((round = 1; round <= rounds; round++)); do
  echo "targets.sh: round $round of $rounds" >&2
  for check in 1 0; do
    sweep shm-allreduce "$check" "${mpi[@]}" "$bin/distcomm-bench-shm" -b 8 -e 64K -f 8 \
      --peer mpi --floor -n 2000 -w 200
    sweep mpi-allreduce "$check" "${mpi[@]}" "$bin/distcomm-bench-mpi" -b 8 -e 64K -f 8 \
      --peer mpi -n 2000 -w 200
    sweep mpi-alltoall "$check" "${mpi[@]}" "$bin/distcomm-bench-mpi" --collective alltoall \
      -b 8 -e 64K -f 8 --peer mpi -n 2000 -w 200
    sweep mpi-alltoallv "$check" "${mpi[@]}" "$bin/distcomm-bench-mpi" --collective alltoallv \
      -b 8 -e 64K -f 8 --peer mpi -n 2000 -w 200
    for be in gloo ucx; do
      sweep "$be-allreduce" "$check" "$bin/distcomm-run" -np 2 "$bin/distcomm-bench-$be" \
        -b 8 -e 64K -f 8 -n 500 -w 50
    done
  done
  sweep shm-allreduce 1 "${mpi[@]}" "$bin/distcomm-bench-shm" -b 256K -e 128M -f 8 \
    --peer mpi --floor -n 20 -w 5
  sweep shm-alltoall 1 "${mpi[@]}" "$bin/distcomm-bench-shm" --collective alltoall \
    -b 8 -e 16M -f 8 --peer mpi -n 200 -w 20
  sweep mpi-alltoall 1 "${mpi[@]}" "$bin/distcomm-bench-mpi" --collective alltoall \
    -b 256K -e 16M -f 8 --peer mpi -n 50 -w 5
  sweep mpi-alltoallv 1 "${mpi[@]}" "$bin/distcomm-bench-mpi" --collective alltoallv \
    -b 256K -e 16M -f 8 --peer mpi -n 50 -w 5
  echo "== round $round: overlap" >>"$log"
  DISTCOMM_CYCLE_TIME=0.001 timeout 600 "$bin/distcomm-run" -np 2 "$bin/distcomm-bench-overlap" \
    --backend shm --profile "$here/profiles/resnet50.txt" --steps 8 2>>"$log" | tee -a "$log" |
    awk '/engine\/max/ { getline; print "overlap 1 0", $5, 0, 0 }' >>"$samples"
done
echo "== tensor-parallel pattern" >>"$log"
tp="$("$here/tp.sh" -B "$build" -r "$rounds" 2>>"$log" || true)"
echo "$tp" >>"$log"

python3 - "$samples" "$rounds" "$tp" >"$out/targets.md" <<'PY'
import collections, statistics as st, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    what, check, size, ours, peer, floor = line.split()
    rows[(what, check, int(size))].append((float(ours), float(peer), float(floor)))
med = lambda xs: st.median(xs) if xs else float("nan")
print(f"# 2 processes, f32 sum, medians of {sys.argv[2]} interleaved rounds (µs)\n")
print("| what | bytes | check on | check off | on / off | peer | peer / on | floor | on / floor |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for what in sorted({w for w, _, _ in rows if w != "overlap"}):
    for size in sorted({s for w, _, s in rows if w == what}):
        on = rows.get((what, "1", size), [])
        off = rows.get((what, "0", size), [])
        t_on, t_off = med([x[0] for x in on]), med([x[0] for x in off])
        peer = med([x[1] for x in on + off if x[1] > 0])
        floor = med([x[2] for x in on + off if x[2] > 0])
        cell = lambda v, f="{:.2f}": "" if v != v else f.format(v)
        print(f"| {what} | {size} | {cell(t_on)} | {cell(t_off)} | {cell(t_on / t_off, '{:.2f}×')} "
              f"| {cell(peer)} | {cell(peer / t_on, '{:.2f}×')} | {cell(floor)} "
              f"| {cell(t_on / floor, '{:.2f}×')} |")
ov = [x[0] for x in rows.get(("overlap", "1", 0), [])]
if ov:
    print(f"\nEngine step, ResNet-50 on shm: engine / max(compute, comm) "
          f"{', '.join(f'{v:.2f}' for v in ov)} (median {med(ov):.2f})")
print("\n```\n" + sys.argv[3] + "\n```")
PY
cat "$out/targets.md"
