#!/usr/bin/env bash
# Test of distcomm-train-libtorch (label "libtorch"): 2 ranks must end with bitwise-identical
# parameters (the hash each rank prints) and a loss at most half the starting one.
#   test_train.sh EXE local                ranks as threads: EXE --backend local --np 2
#   test_train.sh EXE BACKEND DISTCOMM_RUN  ranks as processes: DISTCOMM_RUN -np 2 EXE --backend B
set -euo pipefail
exe="$1" backend="$2" launcher="${3:-}"

out="$(mktemp "${TMPDIR:-/tmp}/distcomm-libtorch.XXXXXX")"
trap 'rm -f "$out"' EXIT
if [[ "$backend" == local ]]; then
  cmd=(timeout 90 "$exe" --backend local --np 2)
else
  [[ -n "$launcher" ]] || { echo "test_train.sh: $backend needs distcomm-run" >&2; exit 2; }
  cmd=("$launcher" -np 2 --timeout 90 "$exe" --backend "$backend")
fi
echo "+ ${cmd[*]}"
"${cmd[@]}" | tee "$out"

# rank R/2: loss FIRST -> LAST after S steps (mean over ranks), parameters fnv1a HASH (backend B)
pattern='rank ([0-9]+)/2: loss ([0-9.e+-]+) -> ([0-9.e+-]+) after [0-9]+ steps .* fnv1a ([0-9a-f]{16}) \(backend ([a-z]+)\)'
ranks=() hashes=()
while IFS= read -r line; do
  [[ "$line" =~ $pattern ]] || continue
  ranks+=("${BASH_REMATCH[1]}")
  hashes+=("${BASH_REMATCH[4]}")
  first="${BASH_REMATCH[2]}" last="${BASH_REMATCH[3]}"
  [[ "${BASH_REMATCH[5]}" == "$backend" ]] ||
    { echo "FAIL: rank ${BASH_REMATCH[1]} ran on ${BASH_REMATCH[5]}, not $backend" >&2; exit 1; }
  awk -v f="$first" -v l="$last" 'BEGIN { exit !(l <= f / 2) }' ||
    { echo "FAIL: rank ${BASH_REMATCH[1]}: loss $first -> $last did not halve" >&2; exit 1; }
done <"$out"
[[ "$(printf '%s\n' "${ranks[@]}" | sort -u | tr '\n' ' ')" == "0 1 " ]] ||
  { echo "FAIL: expected one result line from each of ranks 0 and 1, got: ${ranks[*]:-none}" >&2; exit 1; }
[[ "${hashes[0]}" == "${hashes[1]}" ]] ||
  { echo "FAIL: the ranks' parameters differ: ${hashes[0]} vs ${hashes[1]}" >&2; exit 1; }
echo "libtorch ($backend): 2 ranks, identical parameters (fnv1a ${hashes[0]}), loss halved: ok"
