#!/usr/bin/env bash
# failed_host_exit.sh BACKEND FAULT_PROGRAM: after a failure, the rank that hosts the job's store
# leaves at once. Three ranks started by hand (DistComm's own variables, no launcher to end the
# job), DISTCOMM_TIMEOUT=4, FAULT_PROGRAM = distcomm-test-fault (tests/faults/fault_loop.cpp); rank
# 1 stops itself (SIGSTOP) in the middle of an allreduce loop and stays stopped, holding its
# store connection open. Rank 0 reports its error at the deadline; its process must end within 2 s
# of that line (it used to serve the store on until its linger, min(DISTCOMM_TIMEOUT, 30 s), ran
# out, because the stopped rank never disconnects). Exits 0 when it did, 1 otherwise.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LAUNCHER_LOG_TAG=failed_host_exit
# shellcheck source=tests/launchers/lib.sh
source "$HERE/lib.sh"

backend="${1:?usage: failed_host_exit.sh BACKEND FAULT_PROGRAM}"
program="${2:?usage: failed_host_exit.sh BACKEND FAULT_PROGRAM}"
[[ -x "$program" ]] || fail "$program is not executable"
timeout=4
limit=2  # seconds from rank 0's error line to its exit
work="$(mktemp -d "${TMPDIR:-/tmp}/distcomm-failed-host.XXXXXX")"
pids=()
cleanup() {
  ((${#pids[@]})) && kill_tree 1 "${pids[@]}" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

port="$(free_ports 1)"
for r in 0 1 2; do
  env -i PATH="$PATH" HOME="${HOME:-/}" TMPDIR="${TMPDIR:-/tmp}" \
    DISTCOMM_RANK="$r" DISTCOMM_WORLD_SIZE=3 DISTCOMM_LOCAL_RANK="$r" DISTCOMM_LOCAL_WORLD_SIZE=3 \
    DISTCOMM_MASTER_ADDR=127.0.0.1 DISTCOMM_MASTER_PORT="$port" DISTCOMM_TIMEOUT="$timeout" \
    "$program" --backend "$backend" --victim 1 --signal STOP --after 5 --mib 0.25 \
    >"$work/rank$r.out" 2>&1 &
  pids+=("$!")
done

# Rank 0's end, seen from here (wall clock, as the program's own "(at T)" stamps).
deadline=$((SECONDS + 3 * timeout + 20))
while alive "${pids[0]}"; do
  ((SECONDS < deadline)) || { note "FAILED: rank 0 still runs after $((3 * timeout + 20)) s"; break; }
  sleep 0.02
done
ended="$(date +%s.%N)"
rc=0
wait "${pids[0]}" || rc=$?
show() {
  local r
  for r in 0 1 2; do sed "s|^|[$r] |" "$work/rank$r.out" >&2; done
}

# "rank 0: timeout_error after 4.0 s in allreduce 5 (at 1718000000.123): ..."
reported="$(sed -n 's/^rank 0: [a-z_:]* after [0-9.]* s in allreduce [0-9]* (at \([0-9.]*\)).*/\1/p' \
  "$work/rank0.out" | head -1)"
if [[ -z "$reported" ]]; then
  show
  fail "rank 0 (exit status $rc) printed no error line"
fi
lag="$(awk -v a="$reported" -v b="$ended" 'BEGIN {printf "%.2f", b - a}')"
note "$backend: rank 0 reported its error at $reported and its process ended $lag s later (exit $rc)"
if ! awk -v l="$lag" -v m="$limit" 'BEGIN {exit !(l < m)}'; then
  show
  fail "rank 0 ended $lag s after its error, not within $limit s: its store kept serving the failed job"
fi
[[ "$rc" != 0 ]] || { show; fail "rank 0 exited 0 after a failure"; }
note "passed"
