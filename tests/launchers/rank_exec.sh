#!/usr/bin/env bash
# rank_exec.sh OUTDIR RANK_VARIABLE -- PROG [ARGS...]
# Run by a real launcher (mpirun, mpiexec.hydra, srun) in place of PROG: sends this process's
# stdout and stderr to OUTDIR/rank.<rank>.<pid>.out, the rank read from RANK_VARIABLE (the
# launcher's own, e.g. OMPI_COMM_WORLD_RANK), then execs PROG with the environment untouched, so
# PROG sees exactly what the launcher gave and stays the launcher's direct child.
set -euo pipefail
if (($# < 4)) || [[ "$3" != -- ]]; then
  echo "usage: $0 OUTDIR RANK_VARIABLE -- PROG [ARGS...]" >&2
  exit 2
fi
outdir="$1" var="$2"
shift 3
rank="${!var:-unknown}"
exec >"$outdir/rank.$rank.$$.out" 2>&1
exec "$@"
