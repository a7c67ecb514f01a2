#!/usr/bin/env bash
# The cost model against runs over a shaped link (docs/SCALING.md, Validation): two
# namespace-hosts (tests/multihost/netns.sh) of one rank each, every host's link limited to RATE
# by tc tbf, DistComm's allreduce swept from 8 B to 8 MiB by factors of 4 with ring, rd and tree,
# three interleaved rounds; then `distcomm-sim calibrate` fits the link to ring and rd and
# predicts the tree held out, over every size and from 512 KiB up.
#   sudo docs/scaling/shaped_links.sh [--rate 1gbit] [--backend gloo] [--build build]
# Needs root (namespaces) and tc; prints the fits, keeps the sweeps in $OUT (default a temporary
# folder, removed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rate=1gbit backend=gloo build=$root/build out=''
while (($#)); do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: shaped_links.sh [--rate R] [--backend gloo|ucx|mpi] [--build DIR] [--out DIR]" >&2; exit 2 ;;
  esac
done
if [[ -z "$out" ]]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
launch=(--launch torchrun)
[[ "$backend" == mpi ]] && launch=(--launch mpirun)
for round in 1 2 3; do
  for algo in ring rd tree; do
    bash "$root/tests/multihost/netns.sh" --hosts 2 --ranks-per-host 1 --rate "$rate" "${launch[@]}" \
      --env DISTCOMM_IFACE=@SUBNET@ --timeout 300 -- \
      "$build/bin/distcomm-bench-$backend" -b 8 -e 8M -f 4 -n 10 -w 3 --strategy "$algo" \
      --json "$out/$backend.$algo.r$round.json" >"$out/$backend.$algo.r$round.log" 2>&1 ||
      { cat "$out/$backend.$algo.r$round.log"; exit 1; }
  done
done
sim=$build/bin/distcomm-sim
echo "# $backend over 2 namespace-hosts, each link shaped to $rate (tbf)"
# Every size, then from 512K only: tbf's 256 KB bucket lets smaller messages through unshaped.
for min in 0 512K; do
  "$sim" calibrate --min-bytes "$min" "$out/$backend".ring.r*.json "$out/$backend".rd.r*.json \
    --check "$out/$backend".tree.r*.json --each
done
