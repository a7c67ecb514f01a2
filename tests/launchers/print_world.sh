#!/usr/bin/env bash
# print_world.sh: a stand-in for distcomm-hello that tests the harness, not DistComm's detection.
# Prints the launcher variables it was given, then one line in hello's format,
#   rank R/N: print_world via VARIABLE ok
# with R and N taken from the first launcher it recognises (the order of docs/RENDEZVOUS.md:
# torchrun-style, Open MPI, Hydra/PMI, PMIx, Slurm, TF_CONFIG). Exits 1 when it finds none, or
# when a DISTCOMM_* world variable was set (the launcher tests must not need them).
set -euo pipefail

vars=(
  RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK NODE_RANK MASTER_ADDR MASTER_PORT
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE
  AZ_BATCH_MASTER_NODE AZ_BATCHAI_MPI_MASTER_NODE
  PMI_RANK PMI_SIZE MPI_LOCALRANKID MPI_LOCALNRANKS PMIX_RANK
  SLURM_PROCID SLURM_NTASKS SLURM_LOCALID SLURM_NODEID SLURM_STEP_NODELIST
  TF_CONFIG
)
for v in "${vars[@]}"; do
  if [[ -n "${!v+set}" ]]; then echo "  $v=${!v}"; fi
done

for v in DISTCOMM_RANK DISTCOMM_WORLD_SIZE DISTCOMM_LOCAL_RANK DISTCOMM_MASTER_ADDR \
  DISTCOMM_MASTER_PORT; do
  if [[ -n "${!v+set}" ]]; then
    echo "print_world: $v is set; the launcher tests must work without DISTCOMM_* variables" >&2
    exit 1
  fi
done

# tf_count LIST: how many "host:port" entries cluster.LIST holds in $TF_CONFIG (0 when none).
tf_count() {
  local list
  list="$(sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\[\([^]]*\)\].*/\1/p" <<<"$TF_CONFIG")"
  grep -o '"[^"]*"' <<<"$list" | wc -l
}

rank="" size="" via=""
if [[ -n "${RANK:-}" && -n "${WORLD_SIZE:-}" ]]; then
  rank="$RANK" size="$WORLD_SIZE" via=RANK
elif [[ -n "${OMPI_COMM_WORLD_RANK:-}" ]]; then
  rank="$OMPI_COMM_WORLD_RANK" size="${OMPI_COMM_WORLD_SIZE:-}" via=OMPI_COMM_WORLD_RANK
elif [[ -n "${PMI_RANK:-}" ]]; then
  rank="$PMI_RANK" size="${PMI_SIZE:-}" via=PMI_RANK
elif [[ -n "${PMIX_RANK:-}" ]]; then
  rank="$PMIX_RANK" size="" via=PMIX_RANK
elif [[ -n "${SLURM_PROCID:-}" ]]; then
  rank="$SLURM_PROCID" size="${SLURM_NTASKS:-}" via=SLURM_PROCID
elif [[ -n "${TF_CONFIG:-}" ]]; then
  # "task": {"type": "worker", "index": 1}; good enough for the TF_CONFIG run_under.sh writes.
  task="$(sed -n 's/.*"task"[[:space:]]*:[[:space:]]*{\([^}]*\)}.*/\1/p' <<<"$TF_CONFIG")"
  type="$(sed -n 's/.*"type"[[:space:]]*:[[:space:]]*"\([a-z_]*\)".*/\1/p' <<<"$task")"
  index="$(sed -n 's/.*"index"[[:space:]]*:[[:space:]]*\([0-9]*\).*/\1/p' <<<"$task")"
  chiefs="$(tf_count chief)"
  workers="$(tf_count worker)"
  case "$type" in
    chief) rank="$index" ;;
    worker) rank=$((index + chiefs)) ;;
  esac
  size=$((chiefs + workers)) via="TF_CONFIG($type:$index)"
fi

if [[ -z "$rank" ]]; then
  echo "print_world: no launcher variables found" >&2
  exit 1
fi
echo "rank $rank/${size:-?}: print_world via $via on $(uname -n) pid $$ ok"
