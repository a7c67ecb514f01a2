#!/usr/bin/env bash
# tmp_owner.sh PROBE: a single-node job without a master port (here an Open MPI job's
# environment, no mpirun) meets in $TMPDIR/distcomm-<uid>; nothing another local user prepared
# there may be used. PROBE is distcomm-test-bootstrap (bootstrap_probe.cpp). Each case runs 2
# ranks with TMPDIR a fresh directory:
#   1. distcomm-<uid> owned by another user (nobody), mode 0777: refused at once, naming its owner;
#   2. distcomm-<uid> this user's but mode 0777: refused, naming the mode;
#   3. distcomm-<uid> a symbolic link to another user's directory: refused, naming the link;
#   4. nothing there: the job meets, and the directory it made is mode 0700.
# Needs root (to create another user's directory): otherwise SKIP (77).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LAUNCHER_LOG_TAG=tmp_owner
# shellcheck source=tests/launchers/lib.sh
source "$HERE/lib.sh"

probe="${1:?usage: tmp_owner.sh PROBE}"
[[ -x "$probe" ]] || fail "$probe is not executable"
[[ "$(id -u)" == 0 ]] || skip "needs root to create a directory owned by nobody"
other="$(id -u nobody 2>/dev/null)" || skip "there is no user nobody"
work="$(mktemp -d "${TMPDIR:-/tmp}/distcomm-tmp-owner.XXXXXX")"
chmod 755 "$work"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

errors=0
# job CASE: runs 2 ranks with TMPDIR=$work/CASE; their output in $work/CASE.r0.out, .r1.out.
job() {
  local r pids=()
  for r in 0 1; do
    env -i PATH="$PATH" HOME="${HOME:-/}" TMPDIR="$work/$1" DISTCOMM_TIMEOUT=10 \
      OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=$r \
      OMPI_COMM_WORLD_LOCAL_SIZE=2 PMIX_NAMESPACE="tmp-owner-$1" \
      timeout 30 "$probe" >"$work/$1.r$r.out" 2>&1 &
    pids+=($!)
  done
  rc=0
  for r in "${pids[@]}"; do wait "$r" || rc=1; done
}
# refused CASE PATTERN: both ranks failed, each saying PATTERN.
refused() {
  local r
  job "$1"
  for r in 0 1; do
    if [[ $rc != 0 ]] && grep -Eq -- "$2" "$work/$1.r$r.out"; then
      note "ok: $1: rank $r refused it"
    else
      note "FAILED: $1: rank $r did not refuse with '$2':"
      sed 's/^/    /' "$work/$1.r$r.out" >&2
      errors=$((errors + 1))
    fi
  done
}

me="distcomm-$(id -u)"
mkdir -p "$work/other/$me" && chown "$other" "$work/other/$me" && chmod 777 "$work/other/$me"
refused other "meeting directory .*/$me belongs to uid $other, not to this user"

mkdir -p "$work/open/$me" && chmod 777 "$work/open/$me"
refused open "meeting directory .*/$me is mode 0777, writable by other users"

mkdir -p "$work/link" "$work/elsewhere" && chown "$other" "$work/elsewhere"
ln -s "$work/elsewhere" "$work/link/$me"
refused link "meeting directory .*/$me is a symbolic link"

mkdir -p "$work/fresh"
job fresh
mode="$(stat -c %a "$work/fresh/$me" 2>/dev/null || echo none)"
if [[ $rc == 0 && "$mode" == 700 ]]; then
  note "ok: fresh: the job met, in a directory of mode $mode"
else
  note "FAILED: fresh: exit $rc, directory mode $mode"
  cat "$work"/fresh.r*.out >&2
  errors=$((errors + 1))
fi
((errors == 0)) || exit 1
note "all cases passed"
