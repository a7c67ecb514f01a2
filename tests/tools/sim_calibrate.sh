#!/bin/sh
# distcomm-sim calibrate on sweeps just measured: distcomm-bench-local (2 threads), ring, rd and
# tree, 8 B to 1 MiB, --json; ring and rd fitted, tree held out (--check); passes when the fit
# prints its summary, its machine line and every sample's row, and the held-out summary; and
# --min-bytes leaves the smaller sizes out of both; --per-call fits a cost per call; --one-way
# the one-way factor, in a machine line that `distcomm-sim allreduce` takes as it is.
# usage: sim_calibrate.sh BENCH_LOCAL DISTCOMM_SIM
set -u
[ $# -eq 2 ] || { echo "usage: sim_calibrate.sh BENCH_LOCAL DISTCOMM_SIM" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/distcomm-sim.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
for s in ring rd tree; do
  "$1" -np 2 -b 8 -e 1M -f 8 -n 5 -w 1 --strategy $s --json "$work/$s.json" >/dev/null ||
    { echo "FAIL: distcomm-bench-local --strategy $s"; exit 1; }
done
"$2" calibrate --each "$work/ring.json" "$work/rd.json" --check "$work/tree.json" \
  >"$work/out" 2>&1
status=$?
cat "$work/out"
[ $status -eq 0 ] || { echo "FAIL: distcomm-sim calibrate exited $status"; exit 1; }
grep -Eq '^# fitted: 12 samples \(medians of 12 measurements\) from 2 files; median error' \
  "$work/out" || { echo "FAIL: no summary line"; exit 1; }
num='([0-9.e+-]+|inf)'  # a rate is "inf" where the fit found no cost per byte
grep -Eq "^--alpha-us [0-9.e+-]+ --link-gbps $num --reduce-gbs $num" "$work/out" ||
  { echo "FAIL: no machine line"; exit 1; }
[ "$(grep -Ec '^(ring|rd) +2 +[0-9]+ ' "$work/out")" -eq 12 ] ||
  { echo "FAIL: not one row per sample"; exit 1; }
grep -Eq '^# held out: 6 samples \(medians of 6 measurements\) from 1 file; median error' \
  "$work/out" || { echo "FAIL: no held-out summary"; exit 1; }
[ "$(grep -Ec '^tree +2 +[0-9]+ ' "$work/out")" -eq 6 ] ||
  { echo "FAIL: not one row per held-out sample"; exit 1; }
# --min-bytes leaves the smaller sizes out of both: 4K, 32K and 256K remain.
"$2" calibrate --min-bytes 4K "$work/ring.json" "$work/rd.json" --check "$work/tree.json" \
  >"$work/min" 2>&1 || { cat "$work/min"; echo "FAIL: calibrate --min-bytes"; exit 1; }
grep -Eq '^# fitted: 6 samples ' "$work/min" && grep -Eq '^# held out: 3 samples ' "$work/min" ||
  { cat "$work/min"; echo "FAIL: --min-bytes 4K did not leave 6 and 3 samples"; exit 1; }
# --per-call and --eager add the call's and the rendezvous' alpha to the machine it prints.
"$2" calibrate --per-call --eager 4K "$work/ring.json" "$work/rd.json" "$work/tree.json" \
  >"$work/call" 2>&1 || { cat "$work/call"; echo "FAIL: calibrate --per-call"; exit 1; }
grep -Eq -- '--call-us [0-9.e+-]+' "$work/call" ||
  { cat "$work/call"; echo "FAIL: no --call-us in the fitted machine"; exit 1; }
# --one-way: the factor of the tree's one-way messages, printed with the machine.
"$2" calibrate --per-call --one-way "$work/ring.json" "$work/rd.json" "$work/tree.json" \
  >"$work/oneway" 2>&1 || { cat "$work/oneway"; echo "FAIL: calibrate --one-way"; exit 1; }
machine=$(grep -E -- '^--alpha-us .* --one-way [0-9.e+-]+$' "$work/oneway") ||
  { cat "$work/oneway"; echo "FAIL: no --one-way in the fitted machine"; exit 1; }
# shellcheck disable=SC2086 # the machine line is options, split on purpose
"$2" allreduce $machine --ranks 2 --bytes 8,1M >"$work/table" 2>&1 &&
  grep -Eq '^ +1048576 ' "$work/table" ||
  { cat "$work/table"; echo "FAIL: distcomm-sim allreduce does not take the fitted machine"; exit 1; }
# Times that do not grow with size fit no cost per byte: the machine line says "inf", and
# `distcomm-sim allreduce` takes it (it refused "--link-gbps 0" as an undescribed machine).
for s in ring rd; do
  sed 's/"time_us": [0-9.eE+-]*/"time_us": 5.0/g' "$work/$s.json" >"$work/flat_$s.json"
done
"$2" calibrate "$work/flat_ring.json" "$work/flat_rd.json" >"$work/flat" 2>&1 ||
  { cat "$work/flat"; echo "FAIL: calibrate on flat times"; exit 1; }
machine=$(grep -E -- '^--alpha-us .* --link-gbps inf ' "$work/flat") ||
  { cat "$work/flat"; echo "FAIL: no --link-gbps inf for flat times"; exit 1; }
# shellcheck disable=SC2086 # the machine line is options, split on purpose
"$2" allreduce $machine --ranks 2 --bytes 8,1M >"$work/table" 2>&1 &&
  grep -Eq '^ +1048576 ' "$work/table" ||
  { cat "$work/table"; echo "FAIL: distcomm-sim allreduce does not take a machine of no beta"; exit 1; }
echo PASS
