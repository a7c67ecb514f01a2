#!/usr/bin/env bash
# job_clash.sh PROBE: two jobs started on one MASTER_PORT must not mix. PROBE is
# distcomm-test-bootstrap (bootstrap_probe.cpp). Every process gets torchrun's variables (RANK,
# WORLD_SIZE, LOCAL_*, MASTER_ADDR=127.0.0.1, MASTER_PORT) and nothing else of the caller's
# environment, DISTCOMM_TIMEOUT=20.
#   1. A 2-rank job's rank 0 is up; a 3-rank job is started on the same port together with the
#      2-rank job's rank 1. The intruder's ranks 1 and 2 must fail at once (< 3 s) saying that the
#      store at 127.0.0.1:PORT belongs to another job (world size 2, this rank expects 3) and to
#      choose another MASTER_PORT; its rank 0 must fail at once saying the port is in use and to
#      choose another MASTER_PORT; the 2-rank job must still succeed.
#   2. The same with two 2-rank jobs told apart only by torchrun's TORCHELASTIC_RUN_ID.
# Exits 0 when all of that held, 1 otherwise (the processes' output is shown).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LAUNCHER_LOG_TAG=job_clash
# shellcheck source=tests/launchers/lib.sh
source "$HERE/lib.sh"

probe="${1:?usage: job_clash.sh PROBE}"
[[ -x "$probe" ]] || fail "$probe is not executable"
work="$(mktemp -d "${TMPDIR:-/tmp}/distcomm-job-clash.XXXXXX")"
pids=()
cleanup() {
  ((${#pids[@]})) && kill_tree 2 "${pids[@]}" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# listening PORT: true when some socket listens on 127.0.0.1:PORT or every interface.
listening() {
  local hex f
  hex="$(printf '%04X' "$1")"
  for f in /proc/net/tcp /proc/net/tcp6; do
    # local address column: HEXIP:HEXPORT; state 0A is LISTEN.
    [[ -r "$f" ]] && awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" {found=1} END {exit !found}' "$f" &&
      return 0
  done
  return 1
}

# start NAME RANK SIZE PORT [VAR=VALUE...]: the probe as rank RANK of SIZE, in the background,
# its output in $work/NAME.out; its pid in $work/NAME.pid.
start() {
  local name="$1" rank="$2" size="$3" port="$4"
  shift 4
  env -i PATH="$PATH" HOME="${HOME:-/}" TMPDIR="${TMPDIR:-/tmp}" \
    RANK="$rank" WORLD_SIZE="$size" LOCAL_RANK="$rank" LOCAL_WORLD_SIZE="$size" \
    MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" DISTCOMM_TIMEOUT=20 "$@" \
    "$probe" >"$work/$name.out" 2>&1 &
  echo $! >"$work/$name.pid"
  pids+=("$!")
}

# finish NAME: waits for NAME; its exit status in $rc (not through $(...): a subshell cannot wait
# for this shell's children).
finish() {
  rc=0
  wait "$(cat "$work/$1.pid")" || rc=$?
}

errors=0
# check NAME DESCRIPTION PATTERN: NAME's output matches PATTERN (grep -E).
check() {
  if grep -Eq -- "$3" "$work/$1.out"; then
    note "ok: $1 $2"
  else
    note "FAILED: $1 $2: no line matches '$3'"
    errors=$((errors + 1))
  fi
}
# quick NAME: NAME failed within 3 s of its start (the probe's error line says how long it ran).
quick() {
  local t
  t="$(sed -n 's/^distcomm-test-bootstrap: .* after \([0-9.]*\) s: .*/\1/p' "$work/$1.out" | head -1)"
  if [[ -n "$t" ]] && awk -v t="$t" 'BEGIN {exit !(t < 3)}'; then
    note "ok: $1 failed after $t s"
  else
    note "FAILED: $1 did not fail within 3 s (${t:-no time printed})"
    errors=$((errors + 1))
  fi
}
show() {
  local f
  for f in "$work"/*.out; do sed "s|^|[$(basename "$f" .out)] |" "$f" >&2; done
}

# wait_listening PORT: up to 10 s for the job's store to be up.
wait_listening() {
  local i
  for ((i = 0; i < 100; i++)); do
    listening "$1" && return 0
    sleep 0.1
  done
  show
  fail "nothing listens on port $1 after 10 s"
}

# ---- 1. world size 2 against world size 3 ------------------------------------------------------
port="$(free_ports 1)"
note "1. a 3-rank job started on the port ($port) of a 2-rank job"
start job0 0 2 "$port"
wait_listening "$port"
start intruder0 0 3 "$port"
start intruder1 1 3 "$port"
start intruder2 2 3 "$port"
start job1 1 2 "$port"
for r in 0 1 2; do
  finish "intruder$r"
  [[ "$rc" != 0 ]] || { note "FAILED: intruder$r succeeded"; errors=$((errors + 1)); }
  quick "intruder$r"
done
for r in 1 2; do
  check "intruder$r" "names the store, the port and the clash" \
    "the store at 127\.0\.0\.1:$port belongs to another job \(world size 2, this rank expects 3\)"
  check "intruder$r" "says what to do" "choose another MASTER_PORT"
done
check intruder0 "says the port is taken" "cannot listen on 127\.0\.0\.1:$port: Address already in use"
check intruder0 "says what to do" "already uses port $port; choose another MASTER_PORT"
for r in 0 1; do
  finish "job$r"
  [[ "$rc" == 0 ]] || { note "FAILED: job$r exited $rc"; errors=$((errors + 1)); }
  check "job$r" "completed its job" "^rank $r/2: bootstrap ok \(sum 3\)"
done
check job0 "logged the refusal" "refused a client from 127\.0\.0\.1:[0-9]+: it belongs to another job \(world size 3, this store's job has 2\)"
((errors == 0)) || show
rm -f "$work"/*.out "$work"/*.pid

# ---- 2. the same world size, another torchrun run id -------------------------------------------
port="$(free_ports 1)"
note "2. a 2-rank job with another TORCHELASTIC_RUN_ID started on the port ($port) of a 2-rank job"
start job0 0 2 "$port" TORCHELASTIC_RUN_ID=job-a
wait_listening "$port"
start intruder1 1 2 "$port" TORCHELASTIC_RUN_ID=job-b
start job1 1 2 "$port" TORCHELASTIC_RUN_ID=job-a
finish intruder1
[[ "$rc" != 0 ]] || { note "FAILED: intruder1 succeeded"; errors=$((errors + 1)); }
quick intruder1
check intruder1 "names the clash" \
  "the store at 127\.0\.0\.1:$port belongs to another job \(job 'torchrun:job-a', this rank's job 'torchrun:job-b'\)"
for r in 0 1; do
  finish "job$r"
  [[ "$rc" == 0 ]] || { note "FAILED: job$r exited $rc"; errors=$((errors + 1)); }
  check "job$r" "completed its job" "^rank $r/2: bootstrap ok \(sum 3\)"
done
((errors == 0)) || show
pids=()

((errors == 0)) || fail "$errors check(s) failed"
note "passed"
