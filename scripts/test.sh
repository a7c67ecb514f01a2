#!/usr/bin/env bash
# Builds DistComm and runs every test: the unit tests under AddressSanitizer and
# UndefinedBehaviorSanitizer (in build-asan/), the others in build/ (the torch binding there
# against Debian's torch 1.13), and the torch binding's against the newest torch from PyPI in
# build-torch-<version>/. What CI runs (.ci/run).
# Exits non-zero on any failure.
#
# usage: scripts/test.sh [--no-sanitize] [-j N]
#   --no-sanitize  no sanitizer pass: the unit tests are built and run in build/ (quick local
#                  loops)
#   -j N           parallel build and test jobs (default: number of cores)
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

sanitize=1
while (($#)); do
  case "$1" in
    --no-sanitize) sanitize=0; shift ;;
    -j) [[ $# -ge 2 ]] || die "-j needs a number"; DISTCOMM_JOBS="$2"; shift 2 ;;
    -j*) DISTCOMM_JOBS="${1#-j}"; shift ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$DISTCOMM_JOBS" =~ ^[1-9][0-9]*$ ]] || die "-j wants a positive number, got '$DISTCOMM_JOBS'"
cd "$DISTCOMM_ROOT"

phase "packages" ensure_packages
# With the sanitizer pass, the unit tests (label "unit", but the registry's) are built and run
# there only, once: the main tree leaves them out (DISTCOMM_BUILD_UNIT_TESTS=OFF).
unit_in_main=ON
((sanitize)) && unit_in_main=OFF
phase "configure build/" configure_tree build -DDISTCOMM_WERROR=ON \
  -DDISTCOMM_BUILD_UNIT_TESTS=$unit_in_main
phase "build build/" build_tree build

asan_build=''
if ((sanitize)); then
  # -O0 -g1: half the build time of -O1 on this code (tests/backends/local.cpp: 49 s against
  # 100 s, 2-core VM, 2026-11-27), with function names and lines in reports. The reduction
  # kernels stay -O3 (CMakeLists.txt), so the tests' large buffers do not crawl.
  phase "configure build-asan/" configure_tree build-asan -DDISTCOMM_SANITIZE=ON \
    -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -g1" -DDISTCOMM_BUILD_BENCH=OFF \
    -DDISTCOMM_BUILD_EXAMPLES=OFF -DDISTCOMM_WITH_NCCL=OFF
  # Only what the unit tests need, less the registry's (every backend and init(), checked by the
  # main pass): configured here but not built, hence -LE registry. It builds in the background,
  # at low priority, while the other trees' tests run: they spend much of their time waiting (on
  # peers, deadlines, processes starting), which the build fills, and they pass with the other
  # core busy. Its output: build-asan/build.log, shown if it fails.
  log "=== build build-asan/ (unit tests): in the background, into build-asan/build.log"
  nice -n 10 cmake --build build-asan --parallel "$DISTCOMM_JOBS" --target distcomm_unit_tests \
    >build-asan/build.log 2>&1 &
  asan_build=$!
  trap '[[ -z "$asan_build" ]] || kill "$asan_build" 2>/dev/null || true' EXIT
fi

phase "ctest build/ (all tests)" ctest --test-dir build --output-on-failure -j "$DISTCOMM_JOBS"

# The torch binding against the newest torch pinned in scripts/pypi.txt (build/ has Debian's
# 1.13): its environment from PyPI (scripts/torch.sh; kept outside the clone), the binding alone
# built against it, its tests. scripts/torch-matrix.sh does the same for every supported torch.
newest_torch="$(scripts/torch.sh --list | tail -n 1)"
torch_dir="$(torch_tree_dir "$newest_torch")"
phase "torch $newest_torch ($torch_dir/)" build_torch_tree "$newest_torch"
phase "ctest $torch_dir/ -L torch" ctest --test-dir "$torch_dir" -L torch --output-on-failure \
  -j "$DISTCOMM_JOBS"

if ((sanitize)); then
  # allocator_may_return_null: a size a peer claims is allocated with new (std::nothrow) and a
  # null answer named as the peer's fault (tests of forged 2^47-byte sizes); the sanitizer's
  # allocator would end the process instead.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-strict_string_checks=1:detect_stack_use_after_return=1:allocator_may_return_null=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
  phase "build build-asan/ (what is left of it)" await_build "$asan_build" build-asan/build.log
  asan_build=''
  phase "ctest build-asan/ -L unit" ctest --test-dir build-asan -L unit -LE registry --output-on-failure \
    -j "$DISTCOMM_JOBS"
else
  log "sanitizer pass skipped (--no-sanitize)"
fi

print_phase_summary
log "all tests passed"
