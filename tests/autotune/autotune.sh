#!/bin/sh
# Online autotuning across processes: distcomm-bench-overlap --autotune with 2 ranks under
# distcomm-run (a ResNet-50 profile scaled down, one measured step per candidate). Passes when
#   - both ranks end the search and print the same choice, and the job exits 0;
#   - DISTCOMM_AUTOTUNE_FILE holds that choice afterwards;
#   - a second job with the same file uses it from the start (logs "using ... from FILE"), every
#     rank with the same settings as the first job chose.
# usage: autotune.sh --backend B --bench PATH --distcomm-run PATH --profile FILE
set -u

usage() {
  echo "usage: autotune.sh --backend B --bench PATH --distcomm-run PATH --profile FILE" >&2
  exit 2
}
backend='' bench='' run='' profile=''
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case $1 in
    --backend) backend=$2 ;;
    --bench) bench=$2 ;;
    --distcomm-run) run=$2 ;;
    --profile) profile=$2 ;;
    *) usage ;;
  esac
  shift 2
done
[ -n "$backend" ] && [ -n "$bench" ] && [ -n "$run" ] && [ -n "$profile" ] || usage

work=$(mktemp -d "${TMPDIR:-/tmp}/distcomm-autotune.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
file=$work/choice.json
export DISTCOMM_AUTOTUNE_FILE="$file" DISTCOMM_AUTOTUNE_STEPS=1 DISTCOMM_LOG=info
export DISTCOMM_TIMEOUT=30

fail() {
  echo "FAIL: $*"
  echo "--- $1 job's output:"
  cat "$work/$2"
  exit 1
}

job() {  # job NAME: runs the benchmark, output in $work/NAME
  timeout -k 5 120 "$run" -np 2 --timeout 110 "$bench" --backend "$backend" --profile "$profile" \
    --scale 0.05 --compute-ms 4 --steps 2 --autotune --autotune-steps 200 >"$work/$1" 2>&1
}

# The choice as a rank printed it: "fusion threshold ..., cycle ... ms".
choice_of() {  # choice_of FILE RANK
  sed -n "s/^# rank $2 autotune: \(fusion threshold .* ms\) after .*/\1/p" "$1"
}

job first || fail first first "the job failed (exit $?)"
grep -q 'search unfinished' "$work/first" && fail first first "the search did not end"
c0=$(choice_of "$work/first" 0)
c1=$(choice_of "$work/first" 1)
[ -n "$c0" ] || fail first first "rank 0 printed no choice"
[ "$c0" = "$c1" ] || fail first first "the ranks chose differently: '$c0' and '$c1'"
grep -q 'autotune: searching from' "$work/first" || fail first first "no search was logged"
grep -q "autotune: chose $c0" "$work/first" || fail first first "the choice was not logged"
grep -q '"format": "distcomm-autotune 1"' "$file" || fail first first "no choice in $file"

job second || fail second second "the job failed (exit $?)"
grep -q "autotune: using $c0 from $file" "$work/second" ||
  fail second second "the saved choice was not used"
grep -q 'autotune: searching from' "$work/second" && fail second second "it searched again"
for r in 0 1; do
  [ "$(choice_of "$work/second" $r)" = "$c0" ] ||
    fail second second "rank $r does not use the saved choice '$c0'"
done
echo "PASS: both ranks chose '$c0'; the second job used it from $file"
