#!/usr/bin/env bash
# The GPU checks in one command, for a machine with an NVIDIA GPU that starts bare (CUDA, NCCL
# from Python's nvidia-nccl-cu13, PyTorch 2.x; no package registry): builds DistComm with CUDA and
# NCCL in build-gpu/, then runs each step below, writing a summary and one log under --out.
# Each step is skipped, with the reason, when what it needs is missing; --steps picks some.
#
# usage: scripts/gpu-check.sh [--out DIR] [--steps a,b,...] [--dry-run] [--list] [-j N]
#                             [--python PATH] [--budget SECONDS]
#        scripts/gpu-check.sh --pack-deps
#   --out DIR    where summary.txt and gpu-check.log go (default out/gpu-check)
#   --steps LIST the steps to run, comma-separated (default: all, in the order of --list)
#   --dry-run    print what each step would run, and why a step would be skipped; run nothing
#   --list       the steps, one line each
#   -j N         build jobs (default: the number of cores)
#   --python P   the Python whose torch the binding and the suite use (default: python3 on PATH)
#   --budget S   wall time for everything (default 480): each command is stopped at what is left,
#                and a step with under 20 s left is skipped
#   --pack-deps  (on a Debian 12 machine with apt-get) put the Debian packages the build needs
#                and a bare GPU machine lacks (headers of doctest, nlohmann-json, CLI11, OpenSSL,
#                gloo, and their libraries) unpacked into build-gpu-deps/ (about 12 MiB), to copy to
#                the GPU machine with the checkout; the checks use build-gpu-deps/ when it is there
#
# On the GPU machine, from the repository root, with build-gpu-deps/ beside it:
#   scripts/gpu-check.sh --out DIR
# The summary is a line per step: "<step>: PASS|FAIL|SKIP (<why>) <seconds> s", then the facts
# the probe read (GPU, driver, CUDA, NCCL, torch).
set -uo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DISTCOMM_ROOT" || exit 1

STEPS=(probe build ctest kernels nccl-native torch-binding torch-suite ddp-gpu engine-device
       hierarchical-nccl)
declare -A ABOUT=(
  [probe]="the machine: GPU, driver, nvcc, NCCL, Python's torch, compilers, what build-gpu-deps adds"
  [build]="configure and build build-gpu/ with CUDA and NCCL"
  [ctest]="ctest -L 'nccl|cuda' in build-gpu/"
  [kernels]="distcomm-bench-nccl-kernels: the CUDA kernels against a device-to-device copy"
  [nccl-native]="distcomm-bench-nccl at world size 1, 8 B-256 MiB, beside ncclAllReduce (--peer nccl)"
  [torch-binding]="build the torch binding against this machine's python3 torch, run its tests"
  [torch-suite]="PyTorch's distributed suite on CPU, \"distcomm\" and \"gloo\", world 2 and 4"
  [ddp-gpu]="DDP on the GPU, 2 processes sharing it, \"distcomm\" against \"gloo\", example CNN"
  [engine-device]="the engine's device path: engine(data, control) with NCCL and cuda::fusion"
  [hierarchical-nccl]="hierarchical with nccl inside the node, 1 x 2 processes"
)

out="out/gpu-check"
PY=""
budget=480
only=""
dry=0
while (($#)); do
  case "$1" in
    --out) [[ $# -ge 2 ]] || die "--out needs a folder"; out="$2"; shift 2 ;;
    --steps) [[ $# -ge 2 ]] || die "--steps needs a list"; only="$2"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --list) for s in "${STEPS[@]}"; do printf '%-18s %s\n' "$s" "${ABOUT[$s]}"; done; exit 0 ;;
    -j) [[ $# -ge 2 ]] || die "-j needs a number"; DISTCOMM_JOBS="$2"; shift 2 ;;
    --python) [[ $# -ge 2 ]] || die "--python needs a path"; PY="$2"; shift 2 ;;
    --budget) [[ $# -ge 2 ]] || die "--budget needs seconds"; budget="$2"; shift 2 ;;
    --pack-deps) pack=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/{/^#/p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

DEPS="$DISTCOMM_ROOT/build-gpu-deps"
# What a bare GPU machine lacks for the build, from Debian 12: header-only libraries, OpenSSL's
# headers (its libcrypto.so.3 is carried too), gloo and the libraries libgloo.so.0 needs.
DEP_PACKAGES=(doctest-dev nlohmann-json3-dev libcli11-dev libssl-dev libssl3 libgloo-dev libgloo0
              libhiredis0.14 libibverbs1 libnl-3-200 libnl-route-3-200)

if [[ "${pack:-0}" == 1 ]]; then
  command -v apt-get >/dev/null || die "--pack-deps needs apt-get (a Debian 12 machine)"
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download "${DEP_PACKAGES[@]}") || die "apt-get download failed"
  rm -rf "$DEPS"
  mkdir -p "$DEPS"
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$DEPS" || die "cannot unpack $deb"; done
  rm -rf "$tmp" "$DEPS/usr/share/doc" "$DEPS/usr/share/man"
  find "$DEPS" -name '*.a' -delete  # shared libraries are enough (10 MiB less to copy)
  # gloo's CMake package names its library by absolute path (/usr/lib): make it relative.
  sed -i 's|"/usr/lib/libgloo|"${_IMPORT_PREFIX}/lib/libgloo|' \
    "$DEPS"/usr/share/cmake/Gloo/GlooTargets-*.cmake || die "cannot adjust gloo's CMake package"
  log "packed ${#DEP_PACKAGES[@]} packages into build-gpu-deps/ ($(du -sh "$DEPS" | cut -f1)); copy it to the GPU machine with the checkout"
  exit 0
fi

[[ "$DISTCOMM_JOBS" =~ ^[1-9][0-9]*$ ]] || die "-j wants a positive number, got '$DISTCOMM_JOBS'"
[[ "$budget" =~ ^[1-9][0-9]*$ ]] || die "--budget wants whole seconds, got '$budget'"
END=$((SECONDS + budget))
selected=()
if [[ -n "$only" ]]; then
  IFS=, read -r -a selected <<<"$only"
  for s in "${selected[@]}"; do
    [[ -n "${ABOUT[$s]:-}" ]] || die "no step '$s'; the steps: ${STEPS[*]}"
  done
else
  selected=("${STEPS[@]}")
fi
wanted() { local s; for s in "${selected[@]}"; do [[ "$s" == "$1" ]] && return 0; done; return 1; }

mkdir -p "$out" || die "cannot create $out"
SUMMARY="$out/summary.txt"
LOG="$out/gpu-check.log"
: >"$SUMMARY"
: >"$LOG"
BUILD="$DISTCOMM_ROOT/build-gpu"
[[ -n "${PY:-}" ]] || PY="$(command -v python3 || true)"
[[ -z "$PY" || -x "$PY" ]] || die "--python $PY: not an executable"

# ---- what the machine has (cheap probes, also in a dry run) ------------------------------------
gpu_name() { command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1; }
nvcc_path() {
  if command -v nvcc >/dev/null; then command -v nvcc
  elif [[ -x /usr/local/cuda/bin/nvcc ]]; then echo /usr/local/cuda/bin/nvcc; fi
}
# NCCL's root (include/nccl.h, lib/libnccl.so): the CUDA toolkit's, else the Python package's,
# whose library has only its versioned name, so a folder of links stands in for it.
nccl_root() {
  if [[ -f /usr/local/cuda/include/nccl.h ]] && ls /usr/local/cuda/lib64/libnccl.so* >/dev/null 2>&1; then
    echo /usr/local/cuda; return
  fi
  [[ -n "$PY" ]] || return
  local pkg
  pkg=$("$PY" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null) || return
  [[ -f "$pkg/include/nccl.h" ]] || return
  local shim="$BUILD/nccl-root"
  if ((!dry)); then
    mkdir -p "$shim/lib"
    ln -sfn "$pkg/include" "$shim/include"
    ln -sf "$(find "$pkg/lib" -name 'libnccl.so*' | head -1)" "$shim/lib/libnccl.so"
  fi
  echo "$shim"
}
torch_facts() { [[ -n "$PY" ]] && "$PY" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>/dev/null; }

GPU="$(gpu_name)"
NVCC="$(nvcc_path)"
NCCL_ROOT_FOUND="$(nccl_root)"
TORCH="$(torch_facts)"

# build-gpu-deps/ (--pack-deps) adds its headers, CMake packages and libraries.
if [[ -d "$DEPS/usr" ]]; then
  deps_libs="$DEPS/usr/lib/x86_64-linux-gnu:$DEPS/usr/lib:$DEPS/lib/x86_64-linux-gnu"
  export CMAKE_PREFIX_PATH="$DEPS/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export CPATH="$DEPS/usr/include:$DEPS/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$deps_libs${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$deps_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LDFLAGS="-Wl,-rpath-link,$deps_libs ${LDFLAGS:-}"
fi
if [[ -n "$NCCL_ROOT_FOUND" && -e "$NCCL_ROOT_FOUND/lib/libnccl.so" ]]; then
  nccl_lib="$(dirname "$(readlink -f "$NCCL_ROOT_FOUND/lib/libnccl.so")")"
  export LD_LIBRARY_PATH="$nccl_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# ---- running and recording steps ----------------------------------------------------------------
# x CMD...: runs CMD into the log, stopped when the budget runs out (or, in a dry run, prints it).
x() {
  if ((dry)); then printf '    + %s\n' "$*"; return 0; fi
  printf '+ %s\n' "$*" >>"$LOG"
  local left=$((END - SECONDS))
  ((left > 0)) || { echo "(out of time: --budget $budget s)" >>"$LOG"; return 1; }
  timeout -k 10 "$left" "$@" >>"$LOG" 2>&1
  local rc=$?
  ((rc == 124)) && echo "(stopped: the --budget of $budget s ran out)" >>"$LOG"
  return $rc
}
record() {  # record STEP RESULT WHY SECONDS
  local line="$1: $2${3:+ ($3)} $4 s"
  echo "$line" >>"$SUMMARY"
  log "$line"
}
# run_step STEP: skips it with the reason need_STEP prints, else runs do_STEP.
run_step() {
  local s="$1" fn="${1//-/_}" why start=$SECONDS
  wanted "$s" || return 0
  why="$("need_$fn" | head -1)"
  if [[ -z "$why" ]] && ((!dry && END - SECONDS < 20)); then why="out of time (--budget $budget s)"; fi
  if ((dry)); then
    if [[ -n "$why" ]]; then echo "$s: would skip: $why"; else echo "$s: would run: ${ABOUT[$s]}"; fi
  fi
  if [[ -n "$why" ]]; then record "$s" SKIP "$why" 0; return 0; fi
  printf '\n===== %s: %s\n' "$s" "${ABOUT[$s]}" >>"$LOG"
  if "do_$fn"; then
    record "$s" "$( ((dry)) && echo DRY || echo PASS)" "" $((SECONDS - start))
  else
    record "$s" FAIL "see $s in $(basename "$LOG")" $((SECONDS - start))
  fi
}

no_gpu() { [[ -n "$GPU" ]] || echo "no NVIDIA GPU (nvidia-smi lists none)"; }
built() { [[ -x "$BUILD/bin/$1" ]] || ((dry)) || echo "build-gpu/bin/$1 was not built (step build)"; }

# ---- the steps -----------------------------------------------------------------------------------
need_probe() { :; }
do_probe() {
  {
    echo "gpu: ${GPU:-none}"
    echo "driver: $(command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
    echo "nvcc: ${NVCC:-none} $([[ -n "$NVCC" ]] && "$NVCC" --version | tail -1)"
    echo "nccl: ${NCCL_ROOT_FOUND:-none} $([[ -n "$NCCL_ROOT_FOUND" ]] && grep -hE '^#define NCCL_(MAJOR|MINOR|PATCH) ' "$NCCL_ROOT_FOUND/include/nccl.h" | awk '{printf "%s.", $3}')"
    echo "python3: ${PY:-none}; torch (version, CUDA, GPU seen): ${TORCH:-none}"
    echo "c++: $(c++ --version 2>/dev/null | head -1); cmake: $(cmake --version 2>/dev/null | head -1); ninja: $(ninja --version 2>/dev/null)"
    echo "cores: $(nproc); build-gpu-deps: $([[ -d "$DEPS/usr" ]] && echo used || echo absent)"
  } >>"$SUMMARY.facts"
  ((dry)) && sed 's/^/    /' "$SUMMARY.facts"
  cat "$SUMMARY.facts" >>"$LOG"
}

need_build() {
  [[ -n "$NVCC" ]] || { echo "no nvcc (CUDA toolkit)"; return; }
  [[ -n "$NCCL_ROOT_FOUND" ]] || echo "no NCCL (neither /usr/local/cuda nor Python's nvidia-nccl-cu13)"
}
do_build() {
  local torch_prefix=""
  [[ -n "$TORCH" ]] && torch_prefix=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
  x cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDISTCOMM_WITH_CUDA=ON \
    -DDISTCOMM_WITH_NCCL=ON "-DNCCL_ROOT=$NCCL_ROOT_FOUND" "-DCMAKE_CUDA_COMPILER=$NVCC" \
    -DDISTCOMM_BUILD_EXAMPLES=OFF -DDISTCOMM_INSTALL=OFF ${PY:+"-DDISTCOMM_PYTHON=$PY"} \
    ${torch_prefix:+"-DCMAKE_PREFIX_PATH=$torch_prefix${CMAKE_PREFIX_PATH:+;${CMAKE_PREFIX_PATH//:/;}}"} || return 1
  local targets=(test_nccl_mapping test_nccl_gpu distcomm_run distcomm_bench_nccl
                 distcomm_bench_nccl_kernels)
  if ((!dry)); then
    grep -q 'test_cuda_host_staged' "$BUILD/build.ninja" 2>/dev/null &&
      targets+=(test_cuda_host_staged)
  fi
  x cmake --build "$BUILD" --parallel "$DISTCOMM_JOBS" --target "${targets[@]}"
}

need_ctest() { no_gpu; }
do_ctest() { x ctest --test-dir "$BUILD" -L 'nccl|cuda' --output-on-failure --timeout 300; }

need_kernels() { no_gpu; built distcomm-bench-nccl-kernels; }
do_kernels() { x "$BUILD/bin/distcomm-bench-nccl-kernels"; }

need_nccl_native() { no_gpu; built distcomm-bench-nccl; }
do_nccl_native() {
  x "$BUILD/bin/distcomm-run" -np 1 --timeout 300 "$BUILD/bin/distcomm-bench-nccl" -b 8 -e 256M -f 4 \
    --peer nccl
}

# The binding is configured where torch is a version it is written against (the configure step
# says why not), and built by the step torch-binding, apart: a compile error of it (a torch
# version never built against before) stops nothing else.
binding_configured() {
  [[ -n "$TORCH" ]] || { echo "python3 has no torch"; return; }
  if ((dry)); then return; fi
  grep -q 'distcomm_torch' "$BUILD/build.ninja" 2>/dev/null ||
    echo "the torch binding is not configured for torch ${TORCH%% *}$(grep -ho 'torch.distributed backend skipped: .*' "$LOG" | head -1 | sed 's/^torch.distributed backend skipped/: configure said/')"
}
binding_missing() {
  local why
  why=$(binding_configured)
  if [[ -n "$why" ]] || ((dry)); then echo "$why"; return; fi
  ls "$BUILD"/python/distcomm_torch/*.so >/dev/null 2>&1 ||
    echo "the torch binding did not build against torch ${TORCH%% *} (step torch-binding)"
}
need_torch_binding() { binding_configured; }
do_torch_binding() {
  x cmake --build "$BUILD" --parallel "$DISTCOMM_JOBS" --target distcomm_torch || return 1
  x env PYTHONPATH="$BUILD/python" "$PY" bindings/torch/tests/test_process_group.py || return 1
  # CUDA tensors, 2 ranks sharing the GPU (skips, saying why, where torch sees none)
  x env PYTHONPATH="$BUILD/python" "$PY" bindings/torch/tests/test_process_group.py --device cuda
}

# The suite's subset (unittest -k patterns): the collectives, barriers and DDP on CPU.
SUITE_SUBSET=(-k all_reduce -k broadcast -k all_gather -k reduce_scatter -k barrier
              -k DistributedDataParallel -k any_source)
need_torch_suite() { [[ -n "$TORCH" ]] || echo "python3 has no torch"; }
do_torch_suite() {
  local ok=0 backend world
  for backend in gloo distcomm; do
    if [[ "$backend" == distcomm && -n "$(binding_missing)" ]]; then
      echo "distcomm: skipped: $(binding_missing)" >>"$LOG"; continue
    fi
    for world in 2 4; do
      x env BACKEND=$backend WORLD_SIZE=$world PYTHONPATH="$BUILD/python" "$PY" \
        bindings/torch/tests/suite/run_distributed_test.py --start fork "${SUITE_SUBSET[@]}" ||
        ok=1
    done
  done
  return $ok
}

# Two processes share GPU 0: the example CNN under DDP, "gloo" then "distcomm" (both stage CUDA
# tensors through host memory), each rank saving its final parameters; the ranks of each run must
# end bitwise equal. The throughput lines go to the summary.
need_ddp_gpu() { no_gpu; binding_missing; built distcomm-run; }
do_ddp_gpu() {
  local backend ok=0
  for backend in gloo distcomm; do
    x env PYTHONPATH="$BUILD/python" "$BUILD/bin/distcomm-run" -np 2 --timeout 300 "$PY" \
      examples/torch_ddp/train.py --device cuda --backend "$backend" --steps 40 \
      --save "$out/ddp-$backend-{rank}.pt" || { ok=1; continue; }
    grep "backend $backend)" "$LOG" | tail -1 | sed 's/^/ddp-gpu: /' >>"$SUMMARY.facts"
    x "$PY" -c 'import sys, torch; a, b = (torch.load(f) for f in sys.argv[1:]); print("bitwise equal across ranks:", torch.equal(a, b)); sys.exit(0 if torch.equal(a, b) else 1)' \
      "$out/ddp-$backend-0.pt" "$out/ddp-$backend-1.pt" || ok=1
  done
  rm -f "$out"/ddp-*.pt  # two files come back from a device run: the summary and the log
  return $ok
}

need_engine_device() { no_gpu; built test_nccl_gpu; }
do_engine_device() { x "$BUILD/bin/test_nccl_gpu" '--test-case=engine*'; }

need_hierarchical_nccl() { no_gpu; echo "no program runs hierarchical nccl+gloo yet"; }
do_hierarchical_nccl() { :; }

# ---- main ------------------------------------------------------------------------------------
: >"$SUMMARY.facts"
((dry)) && log "dry run: nothing is built or run; the steps and what each would do:"
for s in "${STEPS[@]}"; do run_step "$s"; done
cat "$SUMMARY.facts" >>"$SUMMARY"
rm -f "$SUMMARY.facts"
log "summary: $SUMMARY; log: $LOG"
! grep -q ': FAIL' "$SUMMARY"
