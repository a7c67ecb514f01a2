#!/usr/bin/env bash
# run_under.sh [OPTIONS] LAUNCHER NP -- PROG [ARGS...]
#
# Runs PROG as NP processes on this machine under a real launcher, or with the environment a
# launcher or job system would give, bounded in time; prints each process's output prefixed by
# its rank ("[R] ..."), the launcher's own output as "[launcher] ...".
#
# LAUNCHER:
#   openmpi          Open MPI's mpirun (mpirun.openmpi, whatever `mpirun` points at), as root,
#                    oversubscribed, shared memory only
#   mpich            MPICH's Hydra, mpiexec.hydra (mpiexec.mpich), fork launcher on localhost
#   slurm            srun -n NP on a private one-node Slurm cluster (slurm_cluster.sh), started
#                    here and stopped at the end
#   torchrun-env     what torchrun gives its workers: RANK, WORLD_SIZE, LOCAL_RANK,
#                    LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_*, MASTER_ADDR=127.0.0.1, MASTER_PORT
#   tfconfig-env     TF_CONFIG with one chief and NP-1 workers on 127.0.0.1 and free ports
#   azureml-env      AzureML PyTorch job: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK,
#                    NODE_RANK (and AZUREML_* markers)
#   azureml-mpi-env  AzureML MPI job, simulated (no mpirun): OMPI_COMM_WORLD_RANK/SIZE/
#                    LOCAL_RANK/LOCAL_SIZE and AZ_BATCH_MASTER_NODE=127.0.0.1:PORT
#   distcomm-run     DistComm's own launcher (needs --distcomm-run)
#   distcomm-run-mpi distcomm-run --backend mpi, which hands the start to Open MPI's mpirun
#                    (needs --distcomm-run); shared memory only, as for openmpi
# The *-env modes start the NP processes themselves and set no DISTCOMM_* variable.
#
# OPTIONS:
#   --timeout S                whole run's deadline (default 60); then everything is killed
#   --expect-per-rank PATTERN  for every rank R, PATTERN with {rank} -> R and {np} -> NP must
#                              match a line of rank R's own output (grep -E); repeatable
#   --forbid-per-rank PATTERN  for every rank R, PATTERN (same placeholders, and {notrank}: the
#                              other ranks, as "(0|2|3)") must match no line of rank R's output;
#                              e.g. 'rank {notrank}/' catches one process that ran every rank
#   --expect PATTERN           must match a line of some rank's output (grep -E); repeatable
#   --expect-fail              the run must fail instead: some process exits non-zero (not by
#                              the timeout); the --expect patterns must still match
#   --distcomm-run PATH        the distcomm-run executable (for the distcomm-run launchers)
#
# Exit status: 0 when every process exited 0 (and the expectations held); 124 on timeout;
# 77 when the launcher is not usable here (not installed, not root for Slurm), with the reason;
# otherwise 1 or the failing process's status (77 from a process is reported as 1).
# Before starting, every launcher variable inherited from the caller (SLURM_*, OMPI_*, PMI_*,
# RANK, TF_CONFIG, DISTCOMM_RANK, ...) is removed, so a test run inside a job sees only ours, and
# so is DISTCOMM_BACKEND (the program's backend is chosen on its command line).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LAUNCHER_LOG_TAG=run_under
# shellcheck source=tests/launchers/lib.sh
source "$HERE/lib.sh"

# Hidden mode: run_under.sh --janitor OWNER_PID OWNER_START DIR, started below in its own session:
# removes DIR once OWNER is gone, for when we are killed outright (ctest's timeout kills with
# SIGKILL, which skips our traps; the processes we started go with us, ctest kills the tree).
if [[ "${1:-}" == --janitor ]]; then
  while alive "$2" && [[ "$(stat_field "$2" 22 || true)" == "$3" ]] && [[ -d "$4" ]]; do
    sleep 1
  done
  rm -rf "$4"
  exit 0
fi

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
  exit 2
}

timeout_s=60
expect_per_rank=()
forbid_per_rank=()
expect_any=()
expect_fail=0
distcomm_run=""
while (($#)); do
  case "$1" in
    --timeout) timeout_s="${2:?--timeout needs seconds}"; shift 2 ;;
    --timeout=*) timeout_s="${1#*=}"; shift ;;
    --expect-per-rank) expect_per_rank+=("${2:?--expect-per-rank needs a pattern}"); shift 2 ;;
    --forbid-per-rank) forbid_per_rank+=("${2:?--forbid-per-rank needs a pattern}"); shift 2 ;;
    --expect) expect_any+=("${2:?--expect needs a pattern}"); shift 2 ;;
    --expect-fail) expect_fail=1; shift ;;
    --distcomm-run) distcomm_run="${2:?--distcomm-run needs a path}"; shift 2 ;;
    -h | --help) usage ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
if (($# < 4)) || [[ "$3" != -- ]]; then usage; fi
launcher="$1" np="$2"
shift 3
[[ "$np" =~ ^[1-9][0-9]*$ ]] || fail "NP must be a positive number, not '$np'"
[[ "$timeout_s" =~ ^[1-9][0-9]*$ ]] || fail "--timeout must be a positive number of seconds"

# The program: a path is made absolute (Slurm's tasks start in our directory anyway).
prog="$1"
shift
if [[ "$prog" == */* ]]; then
  [[ -x "$prog" ]] || fail "$prog: not an executable file (not built?)"
  prog="$(cd "$(dirname "$prog")" && pwd)/$(basename "$prog")"
else
  command -v "$prog" >/dev/null 2>&1 || fail "$prog: not found in PATH"
fi
args=("$@")

# ---------------------------------------------------------------------------------------------
# Scrub every launcher variable we inherited.
scrub_environment() {
  local v
  for v in $(compgen -e); do
    case "$v" in
      SLURM_* | OMPI_* | PMI_* | PMIX_* | MPI_LOCAL* | HYDRA_* | MPIR_* | I_MPI_* | AZ_BATCH* | \
        AZUREML_* | TORCHELASTIC_*)
        unset "$v" ;;
      RANK | WORLD_SIZE | LOCAL_RANK | LOCAL_WORLD_SIZE | GROUP_RANK | GROUP_WORLD_SIZE | ROLE_RANK | \
        ROLE_WORLD_SIZE | ROLE_NAME | NODE_RANK | MASTER_ADDR | MASTER_PORT | TF_CONFIG)
        unset "$v" ;;
      DISTCOMM_RANK | DISTCOMM_WORLD_SIZE | DISTCOMM_LOCAL_RANK | DISTCOMM_MASTER_ADDR | \
        DISTCOMM_MASTER_PORT | DISTCOMM_STORE_ADDR | DISTCOMM_BACKEND)
        unset "$v" ;;
    esac
  done
}
scrub_environment

# ---------------------------------------------------------------------------------------------
tmp="$(mktemp -d "${TMPDIR:-/tmp}/distcomm-launch.XXXXXX")"
outdir="$tmp/out"
mkdir -p "$outdir"
# mktemp makes it 0700; munged wants every directory above its socket open to all (execute).
chmod 755 "$tmp" "$outdir"
pids=()       # what we started and wait for: NP ranks, or the one launcher process
pid_names=()  # their names in messages: the rank, or the launcher's
slurm_dir=""
deadline=$((SECONDS + timeout_s))
# The janitor leaves our process tree (the subshell exits), so a kill of the tree spares it. For
# Slurm, slurm_cluster.sh's watchdog does the same job, and stops the cluster first.
if [[ "$launcher" != slurm ]]; then
  (setsid "$0" --janitor $$ "$(stat_field $$ 22)" "$tmp" </dev/null >/dev/null 2>&1 &)
fi

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if ((${#pids[@]})); then kill_tree 3 "${pids[@]}" 2>/dev/null || true; fi
  if [[ -n "$slurm_dir" ]]; then "$HERE/slurm_cluster.sh" stop "$slurm_dir" >&2 || true; fi
  rm -rf "$tmp" # the janitor sees it gone and ends
  exit "$rc"
}
trap cleanup EXIT
trap 'note "interrupted"; exit 130' INT
trap 'note "terminated"; exit 143' TERM

# print_outputs: every output file, each line prefixed by its rank; the launcher's last.
print_outputs() {
  local f name r
  for ((r = 0; r < np; r++)); do
    for f in "$outdir"/rank."$r".*; do
      [[ -f "$f" ]] || continue
      sed -e "s/^/[$r] /" "$f"
    done
  done
  for f in "$outdir"/*; do
    [[ -f "$f" ]] || continue
    name="$(basename "$f")"
    if [[ "$name" =~ ^rank\.([0-9]+)\. ]] && ((BASH_REMATCH[1] < np)); then continue; fi
    # Files of ranks outside 0..NP-1 (a broken launcher) and the launcher's own output.
    sed -e "s/^/[${name%.out}] /" "$f"
  done
}

# wait_all: waits for every pid in pids until the deadline. The first failure stops the others
# (after a 5 s grace, so they can report); the deadline stops everyone. Returns the status.
wait_all() {
  local i p rc status=0 done_count=0 failed="" first_fail_at=0
  local -a finished=()
  while ((done_count < ${#pids[@]})); do
    for i in "${!pids[@]}"; do
      [[ -n "${finished[$i]:-}" ]] && continue
      p="${pids[$i]}"
      alive "$p" && continue
      rc=0
      wait "$p" || rc=$?
      finished[i]=1
      done_count=$((done_count + 1))
      if ((rc != 0)); then
        note "${pid_names[$i]} exited with status $rc"
        if [[ -z "$failed" ]]; then
          failed="${pid_names[$i]}" status=$rc first_fail_at=$SECONDS
        fi
      fi
    done
    ((done_count < ${#pids[@]})) || break
    if [[ -n "$failed" ]] && ((SECONDS - first_fail_at >= 5)); then
      note "stopping the others: $failed failed"
      kill_tree 3 "${pids[@]}"
      continue
    fi
    if ((SECONDS >= deadline)); then
      note "TIMEOUT: still running after ${timeout_s} s; killing everything"
      kill_tree 3 "${pids[@]}"
      for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
      return 124
    fi
    sleep 0.1
  done
  ((status == 77)) && status=1 # 77 means "skipped" to ctest: only the harness says that
  return "$status"
}

# check_ranks: every rank 0..NP-1 ran once (real launchers: one output file each).
check_ranks() {
  local r n bad=0
  for ((r = 0; r < np; r++)); do
    n="$(find "$outdir" -maxdepth 1 -name "rank.$r.*" | wc -l)"
    if ((n != 1)); then
      note "rank $r ran $n times (expected once)"
      bad=1
    fi
  done
  n="$(find "$outdir" -maxdepth 1 -name 'rank.*' | wc -l)"
  if ((n != np)); then
    note "$n processes ran, expected $np"
    bad=1
  fi
  return "$bad"
}

# rank_pattern PATTERN R: PATTERN with {rank}, {np} and {notrank} filled in for rank R.
rank_pattern() {
  local pat="$1" r="$2" others="" o
  for ((o = 0; o < np; o++)); do
    ((o == r)) || others+="${others:+|}$o"
  done
  pat="${pat//\{rank\}/$r}"
  pat="${pat//\{np\}/$np}"
  pat="${pat//\{notrank\}/(${others:--1})}"
  printf '%s' "$pat"
}

check_expectations() {
  local r pat want ok=0
  for ((r = 0; r < np; r++)); do
    if ! compgen -G "$outdir/rank.$r.*" >/dev/null; then
      if ((${#expect_per_rank[@]} + ${#forbid_per_rank[@]})); then
        note "rank $r: no output at all"
        ok=1
      fi
      continue
    fi
    for pat in "${expect_per_rank[@]}"; do
      want="$(rank_pattern "$pat" "$r")"
      if ! grep -qhE -- "$want" "$outdir"/rank."$r".*; then
        note "rank $r: no line matches '$want'"
        ok=1
      fi
    done
    for pat in "${forbid_per_rank[@]}"; do
      want="$(rank_pattern "$pat" "$r")"
      if grep -qhE -- "$want" "$outdir"/rank."$r".*; then
        note "rank $r: a line matches '$want', which it must not:"
        grep -hE -- "$want" "$outdir"/rank."$r".* | sed -e 's/^/    /' >&2
        ok=1
      fi
    done
  done
  for pat in "${expect_any[@]}"; do
    if ! grep -qhE -- "$pat" "$outdir"/rank.* 2>/dev/null; then
      note "no output line matches '$pat'"
      ok=1
    fi
  done
  return "$ok"
}

# ---------------------------------------------------------------------------------------------
# Real launchers: one process (the launcher) whose ranks run rank_exec.sh, which files each
# rank's output under its rank.

run_launcher() { # NAME RANK_VARIABLE LAUNCHER_COMMAND...
  local name="$1" var="$2"
  shift 2
  note "$* $HERE/rank_exec.sh $outdir $var -- $prog ${args[*]:-}"
  "$@" "$HERE/rank_exec.sh" "$outdir" "$var" -- "$prog" "${args[@]}" \
    >"$outdir/$name.out" 2>&1 </dev/null &
  pids+=("$!")
  pid_names+=("$name")
}

# Open MPI must stay the default MPI (later work builds against it): say so loudly if MPICH
# took over the mpirun/mpicc alternatives. We call mpirun.openmpi directly, so we still work.
check_mpi_alternatives() {
  local mpirun_target mpicc_target
  mpirun_target="$(readlink -f "$(command -v mpirun || echo none)" || true)"
  mpicc_target="$(readlink -f "$(command -v mpicc || echo none)" || true)"
  # Open MPI's mpirun is orterun (4.x) or prterun (5.x); its mpicc is opal_wrapper.
  if [[ "$mpirun_target" != */orterun && "$mpirun_target" != */prterun ]] ||
    [[ "$mpicc_target" != */opal_wrapper ]]; then
    note "WARNING: ======================================================================"
    note "WARNING: mpirun -> ${mpirun_target:-none}, mpicc -> ${mpicc_target:-none}: not Open MPI."
    note "WARNING: DistComm builds against Open MPI; restore it with"
    note "WARNING:   update-alternatives --set mpi /usr/bin/mpicc.openmpi"
    note "WARNING:   update-alternatives --set mpirun /usr/bin/mpirun.openmpi"
    note "WARNING: ======================================================================"
  fi
}

# find_openmpi: sets mpirun to Open MPI's mpirun, or skips.
find_openmpi() {
  mpirun=""
  if command -v mpirun.openmpi >/dev/null 2>&1; then
    mpirun="$(command -v mpirun.openmpi)"
  elif command -v mpirun >/dev/null 2>&1 &&
    [[ "$(mpirun --version 2>&1 || true)" == *"Open MPI"* ]]; then
    mpirun="$(command -v mpirun)"
  else
    skip "Open MPI's mpirun is not installed (apt-get install openmpi-bin)"
  fi
  check_mpi_alternatives
}

start_openmpi() {
  local mpirun
  find_openmpi
  # btl self,vader: shared memory only, no network. No single-copy (CMA) transfers: containers
  # often forbid process_vm_readv between processes. oob over loopback only. --bind-to none:
  # oversubscribed runs must not pin ranks to the same core. Session files in our directory.
  run_launcher mpirun OMPI_COMM_WORLD_RANK \
    "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
    --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
    --mca oob_tcp_if_include lo --mca orte_tmpdir_base "$tmp"
}

start_mpich() {
  local hydra=""
  for hydra in mpiexec.hydra mpiexec.mpich ""; do
    [[ -n "$hydra" ]] && command -v "$hydra" >/dev/null 2>&1 && break
  done
  [[ -n "$hydra" ]] || skip "MPICH's mpiexec.hydra is not installed (apt-get install mpich)"
  hydra="$(command -v "$hydra")"
  # A Hydra that is really Open MPI's mpiexec (alternatives) would not understand us.
  # (Output captured first: grep -q would end the pipe early, and pipefail call that a failure.)
  [[ "$("$hydra" --version 2>&1 || true)" == *HYDRA* ]] || skip "$hydra is not MPICH's Hydra"
  # -launcher fork: no ssh, even for "localhost"; -iface lo: loopback only.
  run_launcher mpiexec.hydra PMI_RANK \
    "$hydra" -launcher fork -hosts localhost -iface lo -n "$np"
}

# distcomm_run_path: checks --distcomm-run; sets inner_timeout, distcomm-run's own --timeout,
# a little before ours so that it stops the job and says so itself.
distcomm_run_path() {
  [[ -n "$distcomm_run" ]] || fail "launcher $launcher needs --distcomm-run PATH"
  [[ -x "$distcomm_run" ]] || fail "$distcomm_run: not an executable file (not built?)"
  inner_timeout=$((timeout_s > 10 ? timeout_s - 5 : timeout_s))
}

start_distcomm_run() {
  local inner_timeout
  distcomm_run_path
  run_launcher distcomm-run DISTCOMM_RANK "$distcomm_run" -np "$np" --timeout "$inner_timeout" --
}

start_distcomm_run_mpi() {
  local mpirun inner_timeout
  distcomm_run_path
  find_openmpi
  # As for openmpi: shared memory only, oob over loopback, session files in our directory. The
  # single-copy mechanism is left to distcomm-run (it turns it off where it cannot work).
  export OMPI_MCA_btl=self,vader OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_orte_tmpdir_base="$tmp"
  run_launcher distcomm-run OMPI_COMM_WORLD_RANK \
    "$distcomm_run" --backend mpi --mpirun "$mpirun" -np "$np" --timeout "$inner_timeout" --
}

start_slurm() {
  local rc=0
  slurm_dir="$tmp/slurm"
  # The watchdog stops the cluster if we are killed outright (ctest's timeout sends SIGKILL).
  LAUNCHER_SLURM_OWNER_PID=$$ LAUNCHER_SLURM_OWNER_TMPDIR="$tmp" \
    LAUNCHER_SLURM_LIFETIME=$((timeout_s + 120)) "$HERE/slurm_cluster.sh" start "$slurm_dir" || rc=$?
  if ((rc != 0)); then
    slurm_dir="" # start cleaned up after itself
    if ((rc == SKIP_CODE)); then exit "$SKIP_CODE"; fi
    fail "the private Slurm cluster did not start"
  fi
  export SLURM_CONF="$slurm_dir/slurm.conf"
  # --overcommit: NP may exceed the node's CPUs; --kill-on-bad-exit: one failed task ends the
  # step; --wait: the others get 10 s after the first task ends; --mpi=none: no PMI plugin.
  # Minutes for --time: the job may never outlive our deadline by much.
  run_launcher srun SLURM_PROCID \
    srun --ntasks="$np" --nodes=1 --mpi=none --overcommit --kill-on-bad-exit=1 --wait=10 \
    --time=$(((timeout_s + 59) / 60 + 1)) --job-name=distcomm-launcher-test
}

# ---------------------------------------------------------------------------------------------
# Simulated launchers: we start the NP processes, each with its own environment.

spawn_rank() { # RANK VAR=VALUE...
  local r="$1"
  shift
  env "$@" "$prog" "${args[@]}" >"$outdir/rank.$r.out" 2>&1 </dev/null &
  pids+=("$!")
  pid_names+=("rank $r")
}

start_torchrun_env() {
  local port r
  port="$(free_ports 1)"
  for ((r = 0; r < np; r++)); do
    spawn_rank "$r" RANK="$r" WORLD_SIZE="$np" LOCAL_RANK="$r" LOCAL_WORLD_SIZE="$np" \
      GROUP_RANK=0 GROUP_WORLD_SIZE=1 ROLE_RANK="$r" ROLE_WORLD_SIZE="$np" ROLE_NAME=default \
      MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" TORCHELASTIC_RUN_ID="distcomm-test-$$" \
      TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0 OMP_NUM_THREADS=1
  done
  note "torchrun-style: $np processes, MASTER_ADDR=127.0.0.1 MASTER_PORT=$port"
}

start_azureml_env() {
  local port r
  port="$(free_ports 1)"
  # AzureML's PyTorch distribution (one node, NP processes): the platform sets MASTER_ADDR,
  # MASTER_PORT, WORLD_SIZE and NODE_RANK, its launcher RANK and LOCAL_RANK per process.
  for ((r = 0; r < np; r++)); do
    spawn_rank "$r" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE="$np" NODE_RANK=0 \
      RANK="$r" LOCAL_RANK="$r" AZUREML_RUN_ID="distcomm-test-$$" AZUREML_ARM_PROJECT_NAME=distcomm-test
  done
  note "AzureML PyTorch-style: $np processes, MASTER_ADDR=127.0.0.1 MASTER_PORT=$port"
}

start_azureml_mpi_env() {
  local port r
  port="$(free_ports 1)"
  # AzureML's MPI jobs run under Open MPI's mpirun; the master node comes from Azure Batch.
  # Simulated: the variables only, no mpirun and no orted.
  for ((r = 0; r < np; r++)); do
    spawn_rank "$r" OMPI_COMM_WORLD_RANK="$r" OMPI_COMM_WORLD_SIZE="$np" \
      OMPI_COMM_WORLD_LOCAL_RANK="$r" OMPI_COMM_WORLD_LOCAL_SIZE="$np" OMPI_COMM_WORLD_NODE_RANK=0 \
      AZ_BATCH_MASTER_NODE="127.0.0.1:$port" AZ_BATCHAI_MPI_MASTER_NODE=127.0.0.1 \
      AZUREML_RUN_ID="distcomm-test-$$"
  done
  note "AzureML MPI-style (simulated): $np processes, AZ_BATCH_MASTER_NODE=127.0.0.1:$port"
}

start_tfconfig_env() {
  local ports r cluster workers="" type index
  mapfile -t ports < <(free_ports "$np")
  for ((r = 1; r < np; r++)); do
    workers+="${workers:+, }\"127.0.0.1:${ports[$r]}\""
  done
  cluster="\"chief\": [\"127.0.0.1:${ports[0]}\"]"
  ((np > 1)) && cluster+=", \"worker\": [$workers]"
  for ((r = 0; r < np; r++)); do
    if ((r == 0)); then type=chief index=0; else type=worker index=$((r - 1)); fi
    spawn_rank "$r" \
      TF_CONFIG="{\"cluster\": {$cluster}, \"task\": {\"type\": \"$type\", \"index\": $index}}"
  done
  note "TF_CONFIG: 1 chief + $((np - 1)) workers: {\"cluster\": {$cluster}, ...}"
}

# ---------------------------------------------------------------------------------------------
real_launcher=1
case "$launcher" in
  openmpi) start_openmpi ;;
  mpich) start_mpich ;;
  slurm) start_slurm ;;
  torchrun-env) start_torchrun_env ;;
  tfconfig-env) start_tfconfig_env ;;
  azureml-env) start_azureml_env ;;
  azureml-mpi-env) start_azureml_mpi_env ;;
  distcomm-run) start_distcomm_run ;;
  distcomm-run-mpi) start_distcomm_run_mpi ;;
  *) fail "unknown launcher '$launcher' (openmpi, mpich, slurm, torchrun-env, tfconfig-env," \
    "azureml-env, azureml-mpi-env, distcomm-run, distcomm-run-mpi)" ;;
esac
case "$launcher" in *-env) real_launcher=0 ;; esac

status=0
wait_all || status=$?
pids=()
print_outputs
if ((expect_fail)); then
  # The failure is the expected outcome; a timeout is not that failure.
  if ((status == 0)); then
    note "every process exited 0, but a failure was expected"
    status=1
  elif ((status != 124)); then
    note "failed as expected (status $status)"
    status=0
    check_expectations || status=1
  fi
else
  if ((status == 0)) && ((real_launcher)); then check_ranks || status=1; fi
  if ((status == 0)); then check_expectations || status=1; fi
fi
if ((status == 0)); then
  note "OK: $launcher, $np processes"
else
  note "FAILED: $launcher, $np processes (status $status)"
fi
exit "$status"
