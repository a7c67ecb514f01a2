#!/usr/bin/env bash
# The torch binding against every supported torch: for each version scripts/torch.sh --list
# names (Debian's 1.13 and the 2.x pinned in scripts/pypi.txt), makes its environment, builds the
# binding against it with -Werror in build-torch-<version>/ and runs its tests there (ctest -L
# torch). Prints one line per version, then fails if any version failed.
#
# usage: scripts/torch-matrix.sh [--versions "V ..."] [-R REGEX] [-j N]
#   --versions  the versions to run (default: every supported one)
#   -R REGEX    only the tests whose names match (ctest -R)
#   -j N        parallel build and test jobs (default: number of cores)
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

versions=""
filter=()
while (($#)); do
  case "$1" in
    --versions) [[ $# -ge 2 ]] || die "--versions needs a list"; versions="$2"; shift 2 ;;
    -R) [[ $# -ge 2 ]] || die "-R needs a regular expression"; filter=(-R "$2"); shift 2 ;;
    -j) [[ $# -ge 2 ]] || die "-j needs a number"; DISTCOMM_JOBS="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
cd "$DISTCOMM_ROOT"
[[ -n "$versions" ]] || versions="$(scripts/torch.sh --list | tr '\n' ' ')"
ensure_packages

lines=()
failed=0
for v in $versions; do
  start=$SECONDS
  dir="$(torch_tree_dir "$v")"
  log "=== torch $v: $dir"
  if ! build_torch_tree "$v"; then
    lines+=("$(printf 'torch %-8s build FAILED (%ss)' "$v" $((SECONDS - start)))")
    failed=1
    continue
  fi
  out="$dir/torch-matrix.log"
  status=0
  ctest --test-dir "$dir" -L torch "${filter[@]}" --output-on-failure -j "$DISTCOMM_JOBS" \
    2>&1 | tee "$out" || status=1
  summary="$(grep -E '^[0-9]+% tests passed' "$out" | tail -1)"
  skipped="$(grep -c '\*\*\*Skipped\|Not Run' "$out" || true)"
  lines+=("$(printf 'torch %-8s %s, %s skipped (%ss)' "$v" "${summary:-no tests ran}" \
    "$skipped" $((SECONDS - start)))")
  ((status == 0)) || failed=1
done
echo
echo "---- torch versions ------------------------------------------"
printf '%s\n' "${lines[@]}"
exit "$failed"
