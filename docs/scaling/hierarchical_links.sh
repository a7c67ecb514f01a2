#!/usr/bin/env bash
# The cost model against flat and hierarchical allreduces across namespace-hosts (docs/SCALING.md,
# Validation): HOSTS namespace-hosts (tests/multihost/netns.sh) of 2 ranks each, every host's link
# limited to RATE by tc tbf; distcomm-multihost-check --hierarchical --bench times the flat gloo
# allreduce and the hierarchical one (shm inside each host, gloo across) in the same job at 1, 4
# and 16 MiB, three interleaved rounds. Prints, per size, the median over the rounds of the
# slowest rank's time (each rank's own median of 10), and the model's prediction for a link of
# --link-gbps (default: fitted by least squares to the flat ring's times when --hosts is 2).
#   sudo docs/scaling/hierarchical_links.sh [--hosts 2] [--rate 1gbit] [--link-gbps G] [--build build]
# Needs root (namespaces), tc and python3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
hosts=2 rate=1gbit gbps='' build=$root/build
while (($#)); do
  case "$1" in
    --hosts) hosts=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --link-gbps) gbps=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "usage: hierarchical_links.sh [--hosts N] [--rate R] [--link-gbps G] [--build DIR]" >&2; exit 2 ;;
  esac
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
sizes=(1048576 4194304 16777216)
for round in 1 2 3; do
  for bytes in "${sizes[@]}"; do
    bash "$root/tests/multihost/netns.sh" --hosts "$hosts" --ranks-per-host 2 --rate "$rate" \
      --env DISTCOMM_BACKEND=gloo --env DISTCOMM_IFACE=eth0 --timeout 300 -- \
      "$build/bin/distcomm-multihost-check" --hierarchical --bench "$bytes" \
      >"$out/$bytes.r$round.log" 2>&1 || { cat "$out/$bytes.r$round.log"; exit 1; }
  done
done
# The measured medians, and a link fitted to the flat ring (2(p-1) steps of n/p, alpha 0).
read -r -a measured < <(python3 - "$out" "$hosts" "${sizes[@]}" <<'EOF'
import re, statistics, sys
out, hosts, sizes = sys.argv[1], int(sys.argv[2]), [int(b) for b in sys.argv[3:]]
p = 2 * hosts
row, fit = [], []
for b in sizes:
    flat, hier = [], []
    for r in (1, 2, 3):
        text = open(f"{out}/{b}.r{r}.log").read()
        flat.append(max(float(x) for x in re.findall(r"flat gloo ([0-9.]+) ms", text)))
        hier.append(max(float(x) for x in re.findall(r"hierarchical ([0-9.]+) ms", text)))
    f, h = statistics.median(flat), statistics.median(hier)
    row += [f"{f:.2f}", f"{h:.2f}"]
    fit.append(2 * (p - 1) * b / p * 8 / (f / 1e3))  # bits per second, one size
# Least squares on the relative error of t = bits / rate: 1 / rate = sum(x) / sum(x^2).
print(f"{sum(x * x for x in fit) / sum(fit) / 1e9:.4g}", *row)
EOF
)
[[ -n "$gbps" ]] || gbps=${measured[0]}
echo "# $hosts namespace-hosts x 2 ranks, each link shaped to $rate (tbf); measured ms:"
i=1
for bytes in "${sizes[@]}"; do
  echo "$bytes bytes: flat ${measured[i]}, hierarchical ${measured[i + 1]}"
  i=$((i + 2))
done
echo "# the model with a link of $gbps Gbit/s:"
"$build/bin/distcomm-sim" allreduce --link-gbps "$gbps" --alpha-us 0 --intra-gbs 10 \
  --intra-alpha-us 1 --ranks-per-node 2 --ranks $((2 * hosts)) --bytes 1M,4M,16M \
  --strategy ring,hierarchical
