#!/usr/bin/env bash
# Sourced by the launcher test scripts (tests/launchers/*.sh); not run on its own.
# Small helpers: logging, skipping (ctest SKIP_RETURN_CODE 77), free TCP ports, bounded waits and
# killing whole process trees.

SKIP_CODE=77

note() { printf '[%s] %s\n' "${LAUNCHER_LOG_TAG:-launchers}" "$*" >&2; }
fail() { note "error: $*"; exit 1; }
# skip REASON: the test cannot run here; ctest reports it as skipped (never as passed).
skip() { note "SKIP: $*"; exit "$SKIP_CODE"; }

# used_ports: every local TCP/UDP port in use (any state), from /proc so no tool is needed.
used_ports() {
  local f sl addr rest
  for f in /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6; do
    [[ -r "$f" ]] || continue
    # Column 2 is the local address, "HEXIP:HEXPORT".
    while read -r sl addr rest; do
      [[ "$sl" == sl ]] && continue
      echo $((16#${addr##*:}))
    done <"$f"
  done
}

# free_ports N: prints N distinct TCP ports that nothing on this machine uses right now, chosen at
# at random from 20000-31999 (below Linux's ephemeral range, 32768-60999, so no outgoing connection
# takes it meanwhile; random so that tests running side by side rarely pick the same one).
free_ports() {
  local want="$1" got=() p used
  used=" $(used_ports | sort -un | tr '\n' ' ') "
  while ((${#got[@]} < want)); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
    if [[ "$used" == *" $p "* || " ${got[*]:-} " == *" $p "* ]]; then continue; fi
    got+=("$p")
  done
  printf '%s\n' "${got[@]}"
}

# stat_field PID N: field N (3 = state, 4 = ppid, 5 = pgid, 6 = session) of /proc/PID/stat.
stat_field() {
  local stat fields
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  # The command name (field 2) is in parentheses and may hold spaces: cut after the last ')'.
  read -r -a fields <<<"${stat##*) }"
  echo "${fields[$(($2 - 3))]}"
}

# alive PID: true while PID exists and is not a zombie.
alive() {
  local state
  state="$(stat_field "$1" 3)" || return 1
  [[ -n "$state" && "$state" != Z ]]
}

# wait_gone SECONDS PID...: waits until none of the PIDs is alive; false if some still are.
wait_gone() {
  local secs="$1" deadline p any
  shift
  deadline=$((SECONDS + secs))
  while :; do
    any=0
    for p in "$@"; do
      if alive "$p"; then any=1; fi
    done
    ((any)) || return 0
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

# descendants PID: PID's children, grandchildren, ... (from /proc, so no pstree/pgrep needed).
descendants() {
  local p kids c
  for p in "$@"; do
    kids=""
    [[ -r "/proc/$p/task/$p/children" ]] && kids="$(cat "/proc/$p/task/$p/children" 2>/dev/null)"
    for c in $kids; do
      echo "$c"
      descendants "$c"
    done
  done
}

# kill_tree GRACE PID...: SIGTERM to each PID, its process group (when it leads one) and all its
# descendants; SIGKILL to whatever is left after GRACE seconds.
kill_tree() {
  local grace="$1" all p
  shift
  all=()
  for p in "$@"; do
    [[ -n "$p" ]] || continue
    all+=("$p")
    mapfile -t -O "${#all[@]}" all < <(descendants "$p")
  done
  ((${#all[@]})) || return 0
  for p in "$@"; do
    if [[ "$(stat_field "$p" 5)" == "$p" ]]; then kill -TERM -- "-$p" 2>/dev/null || true; fi
  done
  kill -TERM "${all[@]}" 2>/dev/null || true
  wait_gone "$grace" "${all[@]}" && return 0
  for p in "$@"; do kill -KILL -- "-$p" 2>/dev/null || true; done
  kill -KILL "${all[@]}" 2>/dev/null || true
  wait_gone 5 "${all[@]}" || note "warning: could not kill: ${all[*]}"
}
