#!/bin/sh
# scripts/gpu-check.sh where there is no GPU (label "scripts"): its dry run names every step and
# says, for each, that it would run or why it would be skipped, and builds or runs nothing; the
# probe step runs for real; an unknown step is refused naming the steps. The GPU machine runs
# the checks themselves (docs/PERFORMANCE.md, "GPU (NCCL)").
# usage: gpu_check.sh SCRIPT
set -u
script=${1:?usage: gpu_check.sh SCRIPT}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
check() {  # check WHAT COMMAND...
  what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}

steps=$("$script" --list | awk '{print $1}')
check "--list names the steps" test -n "$steps"

"$script" --dry-run --out "$out/dry" >"$out/dry.txt" 2>&1
rc=$?
cat "$out/dry.txt"
check "the dry run exits 0 (status $rc)" test "$rc" -eq 0
for s in $steps; do
  check "the dry run says what $s would do" grep -Eq "^$s: would (run: .+|skip: .+)$" "$out/dry.txt"
  check "the summary has a line for $s" grep -Eq "^$s: (DRY|SKIP \(.+\)) [0-9]+ s$" "$out/dry/summary.txt"
done
check "the dry run built nothing" test ! -s "$out/dry/gpu-check.log" -o -z "$(grep '^+ ' "$out/dry/gpu-check.log")"
if ! command -v nvidia-smi >/dev/null 2>&1; then
  check "without a GPU, ctest is skipped for it" grep -q "^ctest: SKIP (no NVIDIA GPU" "$out/dry/summary.txt"
fi

"$script" --steps probe --out "$out/probe" >"$out/probe.txt" 2>&1
rc=$?
check "--steps probe exits 0 (status $rc)" test "$rc" -eq 0
check "the probe passes" grep -Eq "^probe: PASS [0-9]+ s$" "$out/probe/summary.txt"
check "the probe names the GPU, or none" grep -q "^gpu: " "$out/probe/summary.txt"
check "only the probe ran" test "$(grep -c ': \(PASS\|FAIL\|SKIP\|DRY\)' "$out/probe/summary.txt")" -eq 1

"$script" --steps probe,nope --out "$out/nope" >"$out/nope.txt" 2>&1
rc=$?
check "an unknown step is refused (status $rc)" test "$rc" -ne 0
check "the refusal names the steps" grep -q "no step 'nope'; the steps: probe build" "$out/nope.txt"
exit $fail
