#!/bin/sh
# Online autotuning across hosts: distcomm-bench-overlap --autotune on 2 namespace-hosts of 2 ranks
# (tests/multihost/netns.sh), no backend named, so each engine runs over the hierarchical
# communicator (shm inside each host, gloo across). Passes when the job exits 0, it ran
# hierarchical, every rank ended the search on the same choice (its hierarchical threshold
# included), and rank 0 saved it. Skipped
# (77) where namespaces cannot be made.
# usage: multihost.sh NETNS_SH BENCH_OVERLAP PROFILE
set -u
[ $# -eq 3 ] || { echo "usage: multihost.sh NETNS_SH BENCH_OVERLAP PROFILE" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/distcomm-autotune-hosts.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
bash "$1" --hosts 2 --ranks-per-host 2 --timeout 150 --env DISTCOMM_IFACE=eth0 \
  --env DISTCOMM_AUTOTUNE_STEPS=1 --env DISTCOMM_LOG=info \
  --env DISTCOMM_AUTOTUNE_FILE="$work/choice.json" -- \
  "$2" --profile "$3" --scale 0.05 --compute-ms 4 --steps 2 --autotune --autotune-steps 300 \
  >"$work/out" 2>&1
status=$?
[ $status -eq 77 ] && { cat "$work/out"; exit 77; }
fail() { cat "$work/out"; echo "FAIL: $*"; exit 1; }
[ $status -eq 0 ] || fail "the job exited $status"
grep -q '# backend shm+gloo' "$work/out" || fail "not the hierarchical communicator"
grep -q 'search unfinished' "$work/out" && fail "a rank did not end the search"
choices=$(sed -n 's/.*# rank [0-9] autotune: \(fusion threshold .* ms\) after .*/\1/p' "$work/out")
[ "$(printf '%s\n' "$choices" | grep -c .)" -eq 4 ] || fail "not 4 ranks' choices"
[ "$(printf '%s\n' "$choices" | sort -u | wc -l)" -eq 1 ] || fail "the ranks chose differently"
grep -q '"format": "distcomm-autotune 1"' "$work/choice.json" 2>/dev/null ||
  fail "rank 0 saved no choice"
# The threshold from which an allreduce goes the hierarchical way is one of the settings.
printf '%s\n' "$choices" | head -1 | grep -q 'hierarchical from [0-9]' ||
  fail "the choice has no hierarchical threshold"
grep -q '"hierarchical_threshold": [1-9]' "$work/choice.json" ||
  fail "the saved choice has no hierarchical threshold"
echo "PASS: 4 ranks on 2 hosts chose '$(printf '%s\n' "$choices" | head -1)'"
