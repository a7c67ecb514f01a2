#!/usr/bin/env bash
# Test of distcomm-train-libtorch (label "libtorch"): 2 ranks must end with bitwise-identical
# parameters (the hash each rank prints) and a loss at most half the starting one.
#   test_train.sh EXE local                ranks as threads: EXE --backend local --np 2
#   test_train.sh EXE BACKEND DISTCOMM_RUN  ranks as processes: DISTCOMM_RUN -np 2 EXE --backend B
#   test_train.sh EXE BACKEND torchrun PYTHON  ranks started by PyTorch's torchrun (PYTHON -m
#       torch.distributed.run, static rendezvous): they must meet in the agent's c10d store
set -euo pipefail
exe="$1" backend="$2" launcher="${3:-}" python="${4:-}"

out="$(mktemp "${TMPDIR:-/tmp}/distcomm-libtorch.XXXXXX")"
trap 'rm -rf "$out" "$out.logs"' EXIT
agent_store=''
if [[ "$backend" == local ]]; then
  cmd=(timeout 90 "$exe" --backend local --np 2)
elif [[ "$launcher" == torchrun ]]; then
  port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  agent_store="c10d://127.0.0.1:$port/worker/attempt_0"
  export DISTCOMM_LOG=info
  cmd=(timeout 120 "$python" -m torch.distributed.run --nnodes 1 --nproc_per_node 2
       --rdzv_backend static --master_addr 127.0.0.1 --master_port "$port" --max_restarts 0
       --log_dir "$out.logs" --redirects 2 --tee 1
       --no_python "$exe" --backend "$backend")
else
  [[ -n "$launcher" ]] || { echo "test_train.sh: $backend needs distcomm-run" >&2; exit 2; }
  cmd=("$launcher" -np 2 --timeout 90 "$exe" --backend "$backend")
fi
echo "+ ${cmd[*]}"
"${cmd[@]}" | tee "$out"
if [[ -n "$agent_store" ]]; then
  # Each worker's stdout and stderr (DistComm's log) are files of their own under --log_dir
  # (--redirects 2 --tee 1: the Python 3.11 that Debian's torch 1.13 runs on takes no 0 or 3).
  cat "$out".logs/*/attempt_0/*/stdout.log >"$out"
fi

# rank R/2: loss FIRST -> LAST after S steps (mean over ranks), parameters fnv1a HASH (backend B)
pattern='rank ([0-9]+)/2: loss ([0-9.e+-]+) -> ([0-9.e+-]+) after [0-9]+ steps .* fnv1a ([0-9a-f]{16}) \(backend ([a-z]+)\)'
ranks=() hashes=()
while IFS= read -r line; do
  [[ "$line" =~ $pattern ]] || continue
  ranks+=("${BASH_REMATCH[1]}")
  hashes+=("${BASH_REMATCH[4]}")
  first="${BASH_REMATCH[2]}" last="${BASH_REMATCH[3]}"
  [[ "${BASH_REMATCH[5]}" == "$backend" ]] ||
    { echo "FAIL: rank ${BASH_REMATCH[1]} ran on ${BASH_REMATCH[5]}, not $backend" >&2; exit 1; }
  awk -v f="$first" -v l="$last" 'BEGIN { exit !(l <= f / 2) }' ||
    { echo "FAIL: rank ${BASH_REMATCH[1]}: loss $first -> $last did not halve" >&2; exit 1; }
done <"$out"
[[ "$(printf '%s\n' "${ranks[@]}" | sort -u | tr '\n' ' ')" == "0 1 " ]] ||
  { echo "FAIL: expected one result line from each of ranks 0 and 1, got: ${ranks[*]:-none}" >&2; exit 1; }
[[ "${hashes[0]}" == "${hashes[1]}" ]] ||
  { echo "FAIL: the ranks' parameters differ: ${hashes[0]} vs ${hashes[1]}" >&2; exit 1; }
if [[ -n "$agent_store" ]]; then
  found="$(cat "$out".logs/*/attempt_0/*/stderr.log |
    grep -c "torchrun's agent hosts the job's store at $agent_store" || true)"
  [[ "$found" == 2 ]] ||
    { echo "FAIL: expected both ranks to meet in torchrun's agent store $agent_store, $found said so" >&2; exit 1; }
  backend="$backend under torchrun, the agent's store"
fi
echo "libtorch ($backend): 2 ranks, identical parameters (fnv1a ${hashes[0]}), loss halved: ok"
