#!/usr/bin/env bash
# Measures the figures of docs/PERFORMANCE.md: 2 processes, f32 sum, every backend and strategy
# with the raw library it replaces interleaved in the same run (--peer), the machine's limits
# (iperf3 over loopback) in the same session, and the gradient profiles. Each configuration runs
# once per round and the rounds interleave them, so a burst of noise hits one sample of each, not
# every sample of one; bench/summary.py then takes medians across rounds.
#
#   bench/figures.sh [-B BUILD] [-o OUT] [-r ROUNDS]
#
#   -B BUILD   build tree with the executables in BUILD/bin (default: build)
#   -o OUT     directory for the CSV files, logs and summary.md (default: figures)
#   -r ROUNDS  rounds (default: 5)
#
# Needs the bench executables of the mpi, gloo, ucx and local backends (and shm's, when built) (scripts/test.sh or
# scripts/demo.sh build them into build/); installs iperf3 and linux-perf when missing (Debian).
# Talks over loopback only. About 2.5 minutes a round on 2 cores; run it on a quiet machine.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bench/rounds.sh
source "$here/rounds.sh"
round_options figures.sh figures 5 "$@"
require_built figures.sh distcomm-bench-mpi distcomm-bench-gloo distcomm-bench-ucx \
  distcomm-bench-local distcomm-run
# shellcheck source=scripts/common.sh
source "$here/../scripts/common.sh"
ensure_packages iperf3 linux-perf
for tool in mpirun iperf3 python3; do
  command -v "$tool" >/dev/null || { echo "figures.sh: $tool not found" >&2; exit 2; }
done
mkdir -p "$out"

# Open MPI as a user gets it: its defaults, shared memory with the kernel-assisted single copy
# (CMA) where the kernel allows it, as this VM's does. (Until 2026-11-27 this script turned CMA
# off, the configuration ../peers measured as "mpi_shm", which is not what a user runs.)
mpirun=(mpirun --oversubscribe -np 2)
[[ $(id -u) -ne 0 ]] || mpirun+=(--allow-run-as-root)
bandwidth=(-b 32K -e 128M -f 4 -n 20 -w 3)
latency=(-b 8 -e 4K -f 8 -n 2000 -w 200)
profile=(-n 10 -w 2)
export DISTCOMM_TIMEOUT=300

run() {  # run NAME COMMAND...: one sample, CSV to OUT/NAME_ROUND.csv, output to .txt
  local name="$1"
  shift
  echo "  $name"
  "$@" --csv "$out/${name}_$round.csv" >"$out/${name}_$round.txt" 2>&1 ||
    { echo "figures.sh: $name failed, see $out/${name}_$round.txt" >&2; exit 1; }
}

iperf() {  # TCP loopback, 5 s: one stream one way (as ../peers measured it), then both ways
  local mode
  for mode in oneway bidir; do
    iperf3 -s -1 -p 5399 -B 127.0.0.1 >/dev/null 2>&1 &
    local server=$!
    sleep 0.5
    iperf3 -c 127.0.0.1 -p 5399 -t 5 -J $([[ $mode == bidir ]] && echo --bidir) \
      >"$out/iperf3_${mode}_$round.json"
    wait "$server" || true
  done
}

# Memory bandwidth: the reduction kernel and a plain loop over 64 MiB arrays, once.
if [[ -x "$bin/distcomm-bench-kernels" ]]; then
  echo "memory bandwidth (distcomm-bench-kernels)"
  "$bin/distcomm-bench-kernels" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
    >"$out/kernels.txt" 2>&1
fi

for ((round = 1; round <= rounds; ++round)); do
  echo "round $round/$rounds ($(uptime))" | tee -a "$out/load.txt"
  iperf
  for s in native ring tree; do
    run "bw_mpi_$s" "${mpirun[@]}" "$bin/distcomm-bench-mpi" "${bandwidth[@]}" --strategy $s \
      --peer mpi
  done
  for s in native ring; do
    run "bw_gloo_$s" "$bin/distcomm-run" -np 2 "$bin/distcomm-bench-gloo" "${bandwidth[@]}" \
      --strategy $s --peer gloo
  done
  run bw_ucx_ring "${mpirun[@]}" "$bin/distcomm-bench-ucx" "${bandwidth[@]}" --strategy ring \
    --peer mpi
  if [[ -x "$bin/distcomm-bench-shm" ]]; then  # shm under mpirun: MPI_Allreduce in its processes
    # The bound shm's busbw is held to, taken now: two threads copying at once.
    "$bin/distcomm-bench-kernels" --benchmark_filter='^copy' --benchmark_repetitions=3 \
      >"$out/membw_$round.txt" 2>&1
    run bw_shm_native "${mpirun[@]}" "$bin/distcomm-bench-shm" "${bandwidth[@]}" \
      --strategy native --peer mpi
    run lat_shm_native "${mpirun[@]}" "$bin/distcomm-bench-shm" "${latency[@]}" \
      --strategy native --peer mpi
  fi
  for s in native ring; do
    run "bw_local_$s" "$bin/distcomm-bench-local" -np 2 "${bandwidth[@]}" --strategy $s
  done
  for s in native ring rd; do
    run "lat_mpi_$s" "${mpirun[@]}" "$bin/distcomm-bench-mpi" "${latency[@]}" --strategy $s \
      --peer mpi
    run "lat_gloo_$s" "$bin/distcomm-run" -np 2 "$bin/distcomm-bench-gloo" "${latency[@]}" \
      --strategy $s --peer gloo
  done
  for s in ring rd; do
    run "lat_ucx_$s" "${mpirun[@]}" "$bin/distcomm-bench-ucx" "${latency[@]}" --strategy $s \
      --peer mpi
  done
  run prof_gloo_native "$bin/distcomm-run" -np 2 "$bin/distcomm-bench-gloo" "${profile[@]}" \
    --strategy native --peer gloo --profile "$here/profiles/resnet50.txt"
  run prof_gloo_ring "$bin/distcomm-run" -np 2 "$bin/distcomm-bench-gloo" "${profile[@]}" \
    --strategy ring --peer gloo --profile "$here/profiles/resnet50.txt"
  run prof_mpi_native "${mpirun[@]}" "$bin/distcomm-bench-mpi" "${profile[@]}" --strategy native \
    --peer mpi --profile "$here/profiles/resnet50.txt"
  if [[ -x "$bin/distcomm-bench-shm" ]]; then
    run prof_shm_native "${mpirun[@]}" "$bin/distcomm-bench-shm" "${profile[@]}" \
      --strategy native --profile "$here/profiles/resnet50.txt"
  fi
  run prof_local_ring "$bin/distcomm-bench-local" -np 2 "${profile[@]}" --strategy ring \
    --profile "$here/profiles/resnet50.txt"
done
echo "done ($(uptime))" | tee -a "$out/load.txt"
python3 "$here/summary.py" "$out" | tee "$out/summary.md"

# The plot: every round of a configuration in one file (plot.sh averages repeated sizes), the
# raw libraries once each (from the native runs), the peer columns dropped elsewhere.
for name in bw_mpi_native bw_gloo_native; do
  cat "$out/${name}"_[0-9]*.csv >"$out/plot_$name.csv"
done
for name in bw_mpi_ring bw_mpi_tree bw_gloo_ring bw_ucx_ring; do
  cat "$out/${name}"_[0-9]*.csv | cut -d, -f1-19 >"$out/plot_$name.csv"
done
"$here/plot.sh" -o "$out/busbw.png" --log-y \
  --title "allreduce, 2 processes, float sum, in place: bus bandwidth (mean of $rounds rounds)" \
  "$out"/plot_bw_*.csv
echo "plot: $out/busbw.png"
