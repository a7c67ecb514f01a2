#!/usr/bin/env bash
# Packaging test (ctest: consumer_find_package). Installs a DistComm build tree into a temporary
# prefix, then, as a separate project in tests/consumer/:
#   1. asks for a component that does not exist: configure must fail and name it;
#   2. configures with find_package(DistComm 0.1 REQUIRED COMPONENTS local OPTIONAL_COMPONENTS
#      mpi gloo ucx), builds (DistComm::local, the umbrella, and a transport's target alone, which
#      brings local) and runs.
# The temporary prefix and build trees are removed on exit (DISTCOMM_KEEP_TMP=1 keeps them).
#
# usage: run.sh --build-dir DIR [--cmake CMAKE] [--generator GEN] [--make-program PROG]
#               [--cxx COMPILER] [--config BUILD_TYPE] [--sanitize ON|OFF]
# Anything not given is read from DIR/CMakeCache.txt, so the consumer uses the generator,
# compiler and build type the DistComm build used.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build_dir="" cmake="" generator="" make_program="" cxx="" config="" sanitize=""
while (($#)); do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --cmake) cmake="$2"; shift 2 ;;
    --generator) generator="$2"; shift 2 ;;
    --make-program) make_program="$2"; shift 2 ;;
    --cxx) cxx="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --sanitize) sanitize="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$build_dir" ]] || { echo "run.sh: --build-dir is required" >&2; exit 2; }
cache="$build_dir/CMakeCache.txt"
[[ -f "$cache" ]] || { echo "run.sh: $cache not found: configure DistComm there first" >&2; exit 2; }

from_cache() {  # from_cache VAR -> its value in the DistComm build's cache (empty if absent)
  sed -n "s/^$1:[A-Z]*=//p" "$cache" | head -n 1
}
: "${cmake:=$(from_cache CMAKE_COMMAND)}"
: "${cmake:=cmake}"
: "${generator:=$(from_cache CMAKE_GENERATOR)}"
: "${make_program:=$(from_cache CMAKE_MAKE_PROGRAM)}"
: "${cxx:=$(from_cache CMAKE_CXX_COMPILER)}"
: "${config:=$(from_cache CMAKE_BUILD_TYPE)}"
: "${config:=Release}"
: "${sanitize:=$(from_cache DISTCOMM_SANITIZE)}"

# A build configured without install rules has nothing to find: ctest reports the test skipped.
case "$(from_cache DISTCOMM_INSTALL)" in
  OFF|FALSE|NO|0) echo "run.sh: DISTCOMM_INSTALL is OFF in $build_dir: skipped"; exit 77 ;;
esac

tmp="$(mktemp -d "${TMPDIR:-/tmp}/distcomm-consumer.XXXXXX")"
cleanup() {
  if [[ "${DISTCOMM_KEEP_TMP:-0}" == 1 ]]; then echo "run.sh: kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

step() { printf '\n== consumer: %s\n' "$*"; }

step "install $build_dir into $tmp/prefix"
"$cmake" --install "$build_dir" --prefix "$tmp/prefix" --config "$config" >"$tmp/install.log" ||
  { cat "$tmp/install.log"; exit 1; }
grep -c '^-- Installing' "$tmp/install.log" | sed 's/^/installed entries: /'

configure_args=(-G "$generator" "-DCMAKE_BUILD_TYPE=$config" "-DCMAKE_PREFIX_PATH=$tmp/prefix"
                -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
[[ -n "$make_program" ]] && configure_args+=("-DCMAKE_MAKE_PROGRAM=$make_program")
[[ -n "$cxx" ]] && configure_args+=("-DCMAKE_CXX_COMPILER=$cxx")
# A sanitized DistComm's static libraries need the sanitizer runtimes at link time.
case "${sanitize^^}" in
  ON|TRUE|YES|1)
    configure_args+=("-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined")
    configure_args+=("-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined") ;;
esac

step "a component that was not built must fail at configure time, by name"
if "$cmake" -S "$here" -B "$tmp/bogus" "${configure_args[@]}" -DCONSUMER_ASK_BOGUS_COMPONENT=ON \
    >"$tmp/bogus.log" 2>&1; then
  cat "$tmp/bogus.log"
  echo "FAIL: find_package(DistComm COMPONENTS local nosuch) configured successfully" >&2
  exit 1
fi
# CMake wraps long messages: compare on the log joined into one line.
joined="$(tr -s ' \n' '  ' <"$tmp/bogus.log")"
if [[ "$joined" != *"requested but not built: nosuch."* || "$joined" != *"has: core, local"* ]]; then
  cat "$tmp/bogus.log"
  echo "FAIL: the error does not name 'nosuch' and list the built components" >&2
  exit 1
fi
sed -n '/Reason given by package/,/Configuring incomplete/p' "$tmp/bogus.log" | grep -v '^ *$' || true

step "configure the consumer: find_package(DistComm 0.1 REQUIRED COMPONENTS local ...)"
"$cmake" -S "$here" -B "$tmp/build" "${configure_args[@]}"
found_dir="$(sed -n 's/^DistComm_DIR:PATH=//p' "$tmp/build/CMakeCache.txt")"
if [[ "$found_dir" != "$tmp/prefix/"* ]]; then
  echo "FAIL: found DistComm in '$found_dir', not in the fresh install under $tmp/prefix" >&2
  exit 1
fi

step "build the consumer"
"$cmake" --build "$tmp/build" --config "$config"

step "run the consumer"
for exe in distcomm_consumer distcomm_consumer_umbrella; do
  [[ -n "$(find "$tmp/build" -type f -name "$exe" -perm -u+x)" ]] ||
    { echo "FAIL: $exe was not built" >&2; exit 1; }
done
# Also distcomm_consumer_<transport> where the installation has one.
while IFS= read -r bin; do
  echo "+ $(basename "$bin")"
  "$bin"
done < <(find "$tmp/build" -type f -name 'distcomm_consumer*' -perm -u+x | sort)
echo
echo "consumer: OK (install, find_package with COMPONENTS local, link, run; bogus component refused)"
