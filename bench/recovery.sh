#!/usr/bin/env bash
# Time to recover from a lost rank or host, and for a replacement to join, in elastic training
# (distcomm-train-mlp --elastic), for each place the job's store can live. Prints one markdown
# table row per configuration: the median and range of N runs.
#
#   bench/recovery.sh [--build DIR] [--runs N] [--timeouts "5 10"]
#
# One host (tests/elastic/train.sh: 4 ranks under distcomm-run; rank 0 SIGKILLed after epoch 3,
# then a process started with its environment joins): gloo and shm, with the store in
# distcomm-run, in distcomm-store, and in a one-member etcd.
# Several hosts (tests/multihost/host_loss.sh: network namespaces, root only): the hierarchical
# shm+gloo job on 2 x 2 loses host0 (link down, every process killed), which then comes back
# and its ranks join again; the store in distcomm-store on a host of its own, or in an etcd
# cluster of a member per host (3 x 2 there, for the quorum).
# The peer, on one host: torchrun (TorchElastic) restarting every worker (below).
# "recovered": from the fault to the survivors' "N of M ranks go on" (they shrank and agreed on
# the state; the next step follows); "joined": from the replacement's start to "k ranks joined".
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build" runs=3 timeouts="5"
while (($#)); do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --timeouts) timeouts="$2"; shift 2 ;;
    *) echo "usage: bench/recovery.sh [--build DIR] [--runs N] [--timeouts \"5 10\"]" >&2; exit 2 ;;
  esac
done
bin="$build/bin"
etcd=$(command -v etcd || true)
work=$(mktemp -d "${TMPDIR:-/tmp}/distcomm-recovery.XXXXXX")
pids=()
cleanup() {
  for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# "median (min-max)" of the numbers on stdin.
summary() {
  sort -n | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "-"; exit }
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.1f s (%.1f-%.1f)", m, v[1], v[NR] }'
}

echo "| where | store | backend | DISTCOMM_TIMEOUT | recovered | joined |"
echo "|---|---|---|---:|---:|---:|"

# One host. A distcomm-store serves one job: a fresh one for every run.
export DISTCOMM_AUTH_TOKEN=recovery-bench-token-0123456789abcdef
if [[ -n "$etcd" ]]; then
  cport=$(free_port) pport=$(free_port)
  "$etcd" --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$cport" \
    --advertise-client-urls "http://127.0.0.1:$cport" --listen-peer-urls "http://127.0.0.1:$pport" \
    --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "default=http://127.0.0.1:$pport" >"$work/etcd.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q "ready to serve client" "$work/etcd.log" && break; sleep 0.1; done
fi
run=0
for timeout in $timeouts; do
  for backend in gloo shm; do
    for store in distcomm-run distcomm-store etcd; do
      [[ "$store" != etcd || -n "$etcd" ]] || continue
      : >"$work/recovered"
      : >"$work/joined"
      for ((i = 0; i < runs; i++)); do
        run=$((run + 1))
        env=(DISTCOMM_TIMEOUT="$timeout")
        store_pid=''
        case $store in
          distcomm-store)
            "$bin/distcomm-store" --host 127.0.0.1 --port 0 --port-file "$work/port.$run" \
              --world-size 4 >/dev/null 2>>"$work/store.log" &
            store_pid=$!
            for _ in $(seq 100); do [[ -s "$work/port.$run" ]] && break; sleep 0.05; done
            env+=(DISTCOMM_STORE_ADDR="127.0.0.1:$(cat "$work/port.$run")") ;;
          etcd) env+=(DISTCOMM_STORE="etcd://127.0.0.1:$cport/recovery/$run") ;;
        esac
        out=$(env "${env[@]}" sh "$root/tests/elastic/train.sh" --backend "$backend" \
          --signal REPLACE --victim 0 --trainer "$bin/distcomm-train-mlp" \
          --distcomm-run "$bin/distcomm-run" 2>&1) || { echo "run failed: $store $backend" >&2; echo "$out" | tail -20 >&2; }
        sed -n 's/^recovered in \([0-9.]*\) s$/\1/p' <<<"$out" >>"$work/recovered"
        sed -n 's/^joined in \([0-9.]*\) s$/\1/p' <<<"$out" >>"$work/joined"
        [[ -z "$store_pid" ]] || { kill "$store_pid"; wait "$store_pid" || true; }
      done
      echo "| one host, 4 ranks, rank 0 killed | $store | $backend | $timeout | $(summary <"$work/recovered") | $(summary <"$work/joined") |"
    done
  done
done

# The peer on one host: torchrun's own recovery (TorchElastic), which stops every worker when one
# fails and starts them all again (--max_restarts 1, its default --monitor_interval 5), under the
# next attempt's prefix of its agent's store. The same trainer, not --elastic (torchrun restarts
# it), its rank 0 killed after epoch 3; "recovered": from the kill to the restarted rank 0's first
# line (all 4 ranks connected again, starting over: a trainer resumes from its checkpoint).
python=/usr/bin/python3
if "$python" -c 'import torch.distributed.run' 2>/dev/null && [[ -e "$build/lib/libdistcomm_store_c10d.so" ]]; then
  for timeout in $timeouts; do
    : >"$work/recovered"
    for ((i = 0; i < runs; i++)); do
      logs="$work/torchrun.$timeout.$i"
      DISTCOMM_TIMEOUT="$timeout" timeout 120 "$python" -m torch.distributed.run --nnodes 1 \
        --nproc_per_node 4 --rdzv_backend static --master_addr 127.0.0.1 \
        --master_port "$(free_port)" --max_restarts 1 --log_dir "$logs" --redirects 2 --tee 1 \
        --no_python "$bin/distcomm-train-mlp" --backend gloo --epochs 12 >"$work/torchrun.out" 2>&1 &
      job=$!
      for _ in $(seq 600); do
        grep -qs '^epoch   3/' "$logs"/*/attempt_0/0/stdout.log && break
        sleep 0.05
      done
      for p in $(pgrep -f "^$bin/distcomm-train-mlp"); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'RANK=0'; then
          kill -KILL "$p"
          lost_at=$(date +%s.%N)
          for _ in $(seq 1200); do
            grep -qs '^distcomm-train-mlp: 4 ranks' "$logs"/*/attempt_1/0/stdout.log && break
            sleep 0.05
          done
          grep -qs '^distcomm-train-mlp: 4 ranks' "$logs"/*/attempt_1/0/stdout.log &&
            awk -v a="$(date +%s.%N)" -v b="$lost_at" 'BEGIN { printf "%.2f\n", a - b }' >>"$work/recovered"
          break
        fi
      done
      wait "$job" || echo "run failed: torchrun" >&2
    done
    echo "| one host, 4 ranks, rank 0 killed | peer: torchrun's agent (restarts every worker, from the start) | gloo | $timeout | $(summary <"$work/recovered") | - |"
  done
fi

# Several hosts (namespaces: root).
if [[ $(id -u) -ne 0 ]]; then
  echo "(several hosts: skipped, network namespaces need root)" >&2
  exit 0
fi
for timeout in $timeouts; do
  for store in distcomm-store etcd; do
    [[ "$store" != etcd || -n "$etcd" ]] || continue
    : >"$work/recovered"
    : >"$work/joined"
    for ((i = 0; i < runs; i++)); do
      if [[ $store == etcd ]]; then
        args=(--etcd "$etcd" --hosts 3)
      else
        args=(--store "$bin/distcomm-store" --hosts 2)
      fi
      out=$(bash "$root/tests/multihost/netns.sh" "${args[@]}" \
        --ranks-per-host 2 --timeout 150 --lose-host 0 --lose-on '^epoch   3/' \
        --recovered-on 'ranks go on from step' --replace --joined-on 'ranks? joined' \
        --env DISTCOMM_IFACE=eth0 --env DISTCOMM_TIMEOUT="$timeout" -- \
        "$bin/distcomm-train-mlp" --elastic --epochs 40 --samples 8192 2>&1) ||
        { echo "run failed: several hosts, $store" >&2; echo "$out" | tail -20 >&2; }
      sed -n 's/^netns: recovered in \([0-9.]*\) s.*/\1/p' <<<"$out" >>"$work/recovered"
      sed -n 's/^netns: joined in \([0-9.]*\) s.*/\1/p' <<<"$out" >>"$work/joined"
    done
    hosts=2
    [[ $store != etcd ]] || hosts=3
    echo "| $hosts hosts x 2 ranks, host0 lost (link down) | $store | shm+gloo | $timeout | $(summary <"$work/recovered") | $(summary <"$work/joined") |"
  done
done
