#!/usr/bin/env bash
# Shared by scripts/test.sh and scripts/demo.sh (sourced, not run).
# Knows the system packages DistComm needs, how to install the missing ones, and how to configure
# and build a tree the same way every time.

# The Debian packages a DistComm build, its tests and its benchmarks need. The one list: a backend
# that needs more (libopenmpi-dev, ...) is added here.
DISTCOMM_PACKAGES=(
  build-essential
  cmake
  ninja-build
  pkg-config
  doctest-dev
  nlohmann-json3-dev
  libcli11-dev
  libbenchmark-dev
  libssl-dev
  libcurl4-openssl-dev
  etcd-server
  clang
  libclang-rt-14-dev
  openmpi-bin
  libopenmpi-dev
  mpich
  slurm-wlm
  munge
  libgloo-dev
  libucx-dev
  ucx-utils
  python3
  gnuplot-nox
  libtorch-dev
  python3-dev
  python3-torch
  python3-pybind11
  python3-venv
)

DISTCOMM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DISTCOMM_JOBS="${DISTCOMM_JOBS:-$(nproc 2>/dev/null || echo 2)}"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# ensure_packages [PACKAGE...]: installs whichever of the packages (default: DISTCOMM_PACKAGES)
# is not installed yet. Quiet and quick when all are there; DISTCOMM_SKIP_PACKAGES=1 skips it
# (a machine whose dependencies come from elsewhere).
ensure_packages() {
  local packages=("$@") missing=() p
  ((${#packages[@]})) || packages=("${DISTCOMM_PACKAGES[@]}")
  if [[ "${DISTCOMM_SKIP_PACKAGES:-0}" == 1 ]]; then
    return 0
  fi
  if ! command -v dpkg-query >/dev/null 2>&1; then
    log "no dpkg on this machine: make sure these (Debian names) are installed: ${packages[*]}"
    return 0
  fi
  for p in "${packages[@]}"; do
    # dpkg -s also succeeds for a removed package whose configuration files remain.
    [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == "install ok installed" ]] ||
      missing+=("$p")
  done
  ((${#missing[@]})) || return 0

  local sudo=()
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 ||
      die "missing packages ${missing[*]}; not root and no sudo: install them, e.g. as root: apt-get install ${missing[*]}"
    sudo=(sudo)
  fi
  command -v apt-get >/dev/null 2>&1 || die "missing packages ${missing[*]} and no apt-get to install them"
  log "installing missing packages: ${missing[*]}"
  "${sudo[@]}" apt-get update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" || die "apt-get install ${missing[*]} failed"
}

# configure_tree DIR [CMAKE ARGS...]: configures DIR from the repository root, Release unless
# the arguments say otherwise, with Ninja when it is there. A tree already configured keeps
# its generator (CMake refuses to switch).
configure_tree() {
  local dir="$1"; shift
  local generator=()
  if [[ ! -f "$dir/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
    generator=(-G Ninja)
  fi
  cmake -S "$DISTCOMM_ROOT" -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
}

# build_tree DIR [cmake --build ARGS...]
build_tree() {
  local dir="$1"; shift
  cmake --build "$dir" --parallel "$DISTCOMM_JOBS" "$@"
}

# Phase timing: phase NAME COMMAND... runs the command, prints how long it took, and records
# it for print_phase_summary; a failing phase ends the script with its name.
DISTCOMM_PHASES=()
DISTCOMM_START_SECONDS=$SECONDS
phase() {
  local name="$1"; shift
  local start=$SECONDS status=0
  log "=== $name"
  "$@" || status=$?
  local took=$((SECONDS - start))
  DISTCOMM_PHASES+=("$(printf '%-40s %5ss  %s' "$name" "$took" "$([[ $status == 0 ]] && echo ok || echo FAILED)")")
  log "=== $name: $([[ $status == 0 ]] && echo ok || echo "FAILED (exit $status)") in ${took}s"
  if [[ $status != 0 ]]; then
    print_phase_summary
    die "phase '$name' failed"
  fi
}

# await_build PID LOG: waits for a build started in the background; on failure shows the end of
# its LOG.
await_build() {
  local pid="$1" log_file="$2"
  if ! wait "$pid"; then
    tail -n 60 "$log_file" >&2
    return 1
  fi
  tail -n 1 "$log_file"
}

print_phase_summary() {
  local line
  echo
  echo "---- phases -------------------------------------------------"
  for line in "${DISTCOMM_PHASES[@]}"; do echo "$line"; done
  printf '%-40s %5ss\n' "total" "$((SECONDS - DISTCOMM_START_SECONDS))"
}

# torch_tree_dir VERSION: the build tree of the torch binding against torch VERSION.
torch_tree_dir() { echo "build-torch-$1"; }

# build_torch_tree VERSION: makes (or reuses) torch VERSION's environment (scripts/torch.sh) and
# builds the torch binding against it, with -Werror, in build-torch-VERSION/: the binding, what it
# links, and its tests (ctest -L torch there); nothing else of the project.
build_torch_tree() {
  local version="$1" python dir
  python="$("$DISTCOMM_ROOT/scripts/torch.sh" "$version")" || return 1
  dir="$(torch_tree_dir "$version")"
  configure_tree "$dir" -DDISTCOMM_WERROR=ON -DDISTCOMM_WITH_TORCH=ON \
    "-DDISTCOMM_PYTHON=$python" -DDISTCOMM_BUILD_TESTS=OFF -DDISTCOMM_BUILD_TORCH_TESTS=ON \
    -DDISTCOMM_BUILD_EXAMPLES=OFF -DDISTCOMM_BUILD_BENCH=OFF -DDISTCOMM_INSTALL=OFF \
    -DDISTCOMM_WITH_CUDA=OFF -DDISTCOMM_WITH_NCCL=OFF >/dev/null || return 1
  build_tree "$dir" --target distcomm_torch_tests
}
