#!/usr/bin/env bash
# Builds DistComm and runs the hello example: 4 ranks, as threads of one process (the local
# backend), allreduce rank+1 and check the sum on every rank.
#
# usage: scripts/demo.sh [-j N]
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

while (($#)); do
  case "$1" in
    -j) [[ $# -ge 2 ]] || die "-j needs a number"; DISTCOMM_JOBS="$2"; shift 2 ;;
    -j*) DISTCOMM_JOBS="${1#-j}"; shift ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
cd "$DISTCOMM_ROOT"

ensure_packages "${DISTCOMM_PACKAGES[@]}"
configure_tree build -DDISTCOMM_BUILD_EXAMPLES=ON >/dev/null
build_tree build --target distcomm_hello

np=4
log "running build/bin/distcomm-hello --np $np"
build/bin/distcomm-hello --np "$np"
echo
echo "demo: $np ranks (threads of one process, local backend) each allreduced rank+1;" \
     "every rank got 1+2+...+$np = $((np * (np + 1) / 2)) and said ok."
