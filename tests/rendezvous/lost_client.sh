#!/usr/bin/env bash
# A store client whose host is lost without a word (no FIN, no RST: its link goes down) is dropped
# by the store within about DISTCOMM_TIMEOUT, and the key it held goes with it (keep_alive in
# store_socket.cpp). Two network namespaces on a veth pair: distcomm-store on "side", a client
# holding live/1 on "lost"; then lost's link goes down, and a client on side waits for live/1 to
# go. DISTCOMM_TIMEOUT=4 on the store: the key must go within 40 s (10x); without keepalive it
# never does.
# usage: lost_client.sh STORE CLIENT   (distcomm-store, distcomm-test-store-client)
# Needs root and ip (iproute2): otherwise SKIP (77).
set -euo pipefail
store="${1:?usage: lost_client.sh STORE CLIENT}"
client="${2:?usage: lost_client.sh STORE CLIENT}"
skip() { echo "SKIP: $*"; exit 77; }
[[ "$(id -u)" == 0 ]] || skip "needs root to make network namespaces"
command -v ip >/dev/null || skip "needs ip (iproute2)"
id="dc$$"
side="${id}s" lost="${id}l"
net="10.$((200 + RANDOM % 50)).$((RANDOM % 250))"
work="$(mktemp -d "${TMPDIR:-/tmp}/distcomm-lost-client.XXXXXX")"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  ip netns del "$side" 2>/dev/null || true
  ip netns del "$lost" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$side" 2>/dev/null || skip "cannot make network namespaces here"
ip netns add "$lost"
ip link add "${id}a" type veth peer name "${id}b"
ip link set "${id}a" netns "$side"
ip link set "${id}b" netns "$lost"
ip -n "$side" addr add "$net.1/24" dev "${id}a"
ip -n "$lost" addr add "$net.2/24" dev "${id}b"
for ns in "$side" "$lost"; do ip -n "$ns" link set lo up; done
ip -n "$side" link set "${id}a" up
ip -n "$lost" link set "${id}b" up

DISTCOMM_TIMEOUT=4 ip netns exec "$side" "$store" --host "$net.1" --port 0 --no-auth \
  --port-file "$work/port" --timeout 120 >"$work/store.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -s "$work/port" ]] && break; sleep 0.1; done
[[ -s "$work/port" ]] || { cat "$work/store.log"; echo "FAIL: the store did not start"; exit 1; }
addr="$net.1:$(cat "$work/port")"

DISTCOMM_STORE_ADDR="$addr" ip netns exec "$lost" "$client" hold live/1 >"$work/hold.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "^held" "$work/hold.log" && break; sleep 0.1; done
grep -q "^held" "$work/hold.log" || { cat "$work/hold.log"; echo "FAIL: no hold"; exit 1; }
# Held, seen from side.
DISTCOMM_STORE_ADDR="$addr" ip netns exec "$side" "$client" wait-gone live/1 0.5 \
  >"$work/before.log" 2>&1 && { cat "$work/before.log"; echo "FAIL: live/1 not held"; exit 1; }

echo "lost: its link goes down (nothing is sent: no FIN, no RST)"
ip -n "$lost" link set "${id}b" down
if DISTCOMM_STORE_ADDR="$addr" ip netns exec "$side" "$client" wait-gone live/1 40 \
    >"$work/after.log" 2>&1; then
  echo "PASS: the store dropped the lost host's client: live/1 $(cat "$work/after.log")"
else
  cat "$work/after.log" "$work/store.log"
  echo "FAIL: live/1 is still held 40 s after its host was lost"
  exit 1
fi
