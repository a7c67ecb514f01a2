#!/usr/bin/env bash
# tmp_owner.sh PROBE: a single-node job without a master port (here an Open MPI job's
# environment, no mpirun) meets in $TMPDIR/distcomm-<uid>; nothing another local user prepared
# there may be used. PROBE is distcomm-test-bootstrap (bootstrap_probe.cpp). Each case runs 2
# ranks with TMPDIR a fresh directory:
#   1. distcomm-<uid> owned by another user (nobody), mode 0777: refused at once, naming its owner;
#   2. distcomm-<uid> this user's but mode 0777: refused, naming the mode;
#   3. distcomm-<uid> a symbolic link to another user's directory: refused, naming the link;
#   4. nothing there: the job meets, and the directory it made is mode 0700;
#   5. the store rank 0 serves on 127.0.0.1 for that meeting (no token in the environment, as
#      under mpirun): another local user (nobody) who knows its port and sets the job's variables
#      is refused, for want of the token rank 0 made and left in the 0700 directory.
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
refused open "meeting directory .*/$me is mode 0777, open to other users"

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
# 5. An intruder at the store's door.
mkdir -p "$work/knock"
env -i PATH="$PATH" HOME="${HOME:-/}" TMPDIR="$work/knock" DISTCOMM_TIMEOUT=10 \
  PROBE_HOLD_UNTIL="$work/knock.done" \
  OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 \
  OMPI_COMM_WORLD_LOCAL_SIZE=2 PMIX_NAMESPACE="tmp-owner-knock" \
  timeout 60 "$probe" >"$work/knock.r0.out" 2>&1 &
holder=$!
env -i PATH="$PATH" HOME="${HOME:-/}" TMPDIR="$work/knock" DISTCOMM_TIMEOUT=10 \
  OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=1 \
  OMPI_COMM_WORLD_LOCAL_SIZE=2 PMIX_NAMESPACE="tmp-owner-knock" \
  timeout 30 "$probe" >"$work/knock.r1.out" 2>&1 || true
port=''
for _ in $(seq 100); do
  port="$(sed -n 's/^rank 0: store on port \([0-9]*\)$/\1/p' "$work/knock.r0.out")"
  [[ -n "$port" ]] && break
  sleep 0.1
done
if [[ -z "$port" ]]; then
  note "FAILED: knock: rank 0 did not say its store's port:"
  cat "$work"/knock.r*.out >&2
  errors=$((errors + 1))
else
  # The job's own variables, as rank 1 of it, pointed at rank 0's store: only the token differs.
  # (A copy of the probe in the work folder, which nobody may enter, whatever the clone's modes.)
  cp "$probe" "$work/probe" && chmod 755 "$work/probe"
  intruder_rc=0
  runuser -u nobody -- env -i PATH="$PATH" TMPDIR=/tmp DISTCOMM_TIMEOUT=5 \
    DISTCOMM_STORE_ADDR="127.0.0.1:$port" OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 \
    OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2 PMIX_NAMESPACE="tmp-owner-knock" \
    timeout 30 "$work/probe" >"$work/knock.intruder.out" 2>&1 || intruder_rc=$?
  if [[ $intruder_rc != 0 ]] && grep -q "authentication failed" "$work/knock.intruder.out"; then
    note "ok: knock: another user was refused: $(head -c 300 "$work/knock.intruder.out")"
  else
    note "FAILED: knock: another user's client (exit $intruder_rc) was not refused for want of" \
         "the token:"
    sed 's/^/    /' "$work/knock.intruder.out" >&2
    errors=$((errors + 1))
  fi
fi
touch "$work/knock.done"
wait "$holder" || true

((errors == 0)) || exit 1
note "all cases passed"
