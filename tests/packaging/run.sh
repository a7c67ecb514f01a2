#!/usr/bin/env bash
# Packaging tests (label "packaging"). Installs a DistComm build tree's development and runtime
# components into a temporary prefix, then checks one way of consuming it:
#   --check pkgconfig     the pkg-config modules: prefix, validity, one module per built
#                         component (core and local: distcomm) and distcomm-all; programs
#                         compiled with nothing but `c++ x.cpp $(pkg-config --cflags --libs ...)`
#                         and run: test_package.cpp on distcomm alone; examples/hello/hello.cpp
#                         (distcomm::init()) on distcomm-init and on distcomm-all, --np 2, then
#                         2 processes on each transport built; plugins/examples/tcp built as a
#                         plugin on distcomm-plugin_abi alone and run under hello by its name
#   --check test_package  the recipes' static checks (check_recipes.py) against the installed
#                         export, and test_package/ (the Conan test project) configured with
#                         plain CMake against the prefix, built and run
#   --check libtorch      examples/libtorch configured as a project of its own against the
#                         prefix (find_package(DistComm COMPONENTS init)), built, and run with 2
#                         ranks as threads (examples/libtorch/test_train.sh)
#   --check plugin_example  plugins/examples/tcp (an out-of-tree backend plugin, its own CMake
#                         project using only the installed C header) built against the prefix,
#                         then loaded by name by the installed distcomm-backend-check, which runs
#                         the backend suite over it as 2 and 3 processes (distcomm-run)
# The temporary prefix and build trees are removed on exit (DISTCOMM_KEEP_TMP=1 keeps them).
#
# usage: run.sh --build-dir DIR --check pkgconfig|test_package|libtorch|plugin_example
#               [--cmake CMAKE]
#               [--generator GEN] [--make-program PROG] [--cxx COMPILER] [--config BUILD_TYPE]
#               [--sanitize ON|OFF] [--distcomm-run PATH] [--mpiexec PATH] [--python PATH]
# Anything not given is read from DIR/CMakeCache.txt.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source_dir="$(cd "$here/../.." && pwd)"
build_dir="" check="" cmake="" generator="" make_program="" cxx="" config="" sanitize=""
distcomm_run="" mpiexec="" python="python3"
while (($#)); do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --check) check="$2"; shift 2 ;;
    --cmake) cmake="$2"; shift 2 ;;
    --generator) generator="$2"; shift 2 ;;
    --make-program) make_program="$2"; shift 2 ;;
    --cxx) cxx="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --sanitize) sanitize="$2"; shift 2 ;;
    --distcomm-run) distcomm_run="$2"; shift 2 ;;
    --mpiexec) mpiexec="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$build_dir" ]] || { echo "run.sh: --build-dir is required" >&2; exit 2; }
case "$check" in
  pkgconfig|test_package|libtorch|plugin_example) ;;
  *) echo "run.sh: --check pkgconfig|test_package|libtorch|plugin_example is required" >&2; exit 2 ;;
esac
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
: "${cxx:=c++}"
: "${config:=$(from_cache CMAKE_BUILD_TYPE)}"
: "${config:=Release}"
: "${sanitize:=$(from_cache DISTCOMM_SANITIZE)}"
pkgconfig_dir="$(from_cache DISTCOMM_INSTALL_PKGCONFIGDIR)"
: "${pkgconfig_dir:=lib/pkgconfig}"

# A build configured without install rules has nothing to consume: ctest reports it skipped.
case "$(from_cache DISTCOMM_INSTALL)" in
  OFF|FALSE|NO|0) echo "run.sh: DISTCOMM_INSTALL is OFF in $build_dir: skipped"; exit 77 ;;
esac

tmp="$(mktemp -d "${TMPDIR:-/tmp}/distcomm-packaging.XXXXXX")"
cleanup() {
  if [[ "${DISTCOMM_KEEP_TMP:-0}" == 1 ]]; then echo "run.sh: kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
prefix="$tmp/prefix"

step() { printf '\n== packaging (%s): %s\n' "$check" "$*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
# A sanitized DistComm's static libraries need the sanitizer runtimes in whatever links them.
sanitize_flags=()
# shellcheck disable=SC2054  # one flag, whose value has commas
case "${sanitize^^}" in
  ON|TRUE|YES|1) sanitize_flags=(-fsanitize=address,undefined) ;;
esac
# The programs compiled from pkg-config's flags get the build type's flags, as the CMake projects
# below do through CMAKE_CXX_FLAGS_<CONFIG>, but at -O1 in place of -O2 or -O3: they check what the
# package provides (flags, targets, libraries), not the code the compiler makes, and -O1 halves
# their build (examples/libtorch: 60 s at -O3, 2-core VM, 2026-11-27).
read -r -a config_flags <<<"$(from_cache "CMAKE_CXX_FLAGS_${config^^}" |
  sed -E 's/(^| )-O[23s]( |$)/\1-O1\2/g')"
compile_flags=(${config_flags[@]+"${config_flags[@]}"} ${sanitize_flags[@]+"${sanitize_flags[@]}"})

# Only the two components a package is made of (libraries, headers, CMake and pkg-config files):
# what they install must be enough on its own.
step "install the DistComm_Development and DistComm_Runtime components of $build_dir into $prefix"
for component in DistComm_Development DistComm_Runtime; do
  "$cmake" --install "$build_dir" --prefix "$prefix" --config "$config" \
    --component "$component" >>"$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
done
grep -c '^-- Installing' "$tmp/install.log" | sed 's/^/installed entries: /'
config_file="$prefix/lib/cmake/DistComm/DistCommConfig.cmake"
[[ -f "$config_file" ]] || config_file="$(find "$prefix" -name DistCommConfig.cmake | head -n 1)"
[[ -f "$config_file" ]] || fail "no DistCommConfig.cmake under $prefix"
# The components this installation was built with, as DistCommConfig.cmake advertises them.
read -r -a components <<<"$(sed -n 's/^set(DistComm_BUILT_COMPONENTS "\(.*\)")$/\1/p' \
  "$config_file" | tr ';' ' ')"
((${#components[@]})) || fail "DistComm_BUILT_COMPONENTS not found in $config_file"
echo "built components: ${components[*]}"
has_component() { [[ " ${components[*]} " == *" $1 "* ]]; }

# build_against_prefix SOURCE NAME EXE: configures SOURCE (a CMake project that finds DistComm)
# in $tmp/NAME against $prefix, checks it found DistComm there, builds it and prints the path of
# the executable EXE it built.
build_against_prefix() {
  local source="$1" name="$2" exe="$3" found bin
  local configure_args=(-G "$generator" "-DCMAKE_BUILD_TYPE=$config" "-DCMAKE_PREFIX_PATH=$prefix"
                        -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "-DCMAKE_CXX_COMPILER=$cxx"
                        "-DCMAKE_CXX_FLAGS_${config^^}=${config_flags[*]}")
  [[ -n "$make_program" ]] && configure_args+=("-DCMAKE_MAKE_PROGRAM=$make_program")
  if ((${#sanitize_flags[@]})); then
    configure_args+=("-DCMAKE_CXX_FLAGS=${sanitize_flags[*]}"
                     "-DCMAKE_EXE_LINKER_FLAGS=${sanitize_flags[*]}")
  fi
  "$cmake" -S "$source" -B "$tmp/$name" "${configure_args[@]}" >&2
  found="$(sed -n 's/^DistComm_DIR:PATH=//p' "$tmp/$name/CMakeCache.txt")"
  [[ "$found" == "$prefix/"* ]] ||
    fail "$name found DistComm in '$found', not in the fresh install under $prefix"
  "$cmake" --build "$tmp/$name" --config "$config" >&2
  bin="$(find "$tmp/$name" -type f -name "$exe" -perm -u+x | head -n 1)"
  [[ -n "$bin" ]] || fail "$exe was not built"
  echo "$bin"
}

if [[ "$check" == libtorch ]]; then
  step "configure and build examples/libtorch on its own against $prefix"
  bin="$(build_against_prefix "$source_dir/examples/libtorch" libtorch distcomm-train-libtorch)"
  step "run it: 2 ranks as threads"
  "$source_dir/examples/libtorch/test_train.sh" "$bin" local
  echo
  echo "packaging: OK (examples/libtorch built against the install and run)"
  exit 0
fi

if [[ "$check" == plugin_example ]]; then
  step "configure and build plugins/examples/tcp (its own CMake project) against $prefix"
  plugin="$(build_against_prefix "$source_dir/plugins/examples/tcp" tcp libdistcomm_backend_tcp.so)"
  # Its table and its declaration (distcomm_backend_traits_v1.h), nothing else.
  exported="$(nm -D --defined-only "$plugin" | awk '{print $3}' | sort | tr '\n' ' ')"
  [[ "$exported" == "distcomm_backend_plugin_v1 distcomm_backend_plugin_v1_traits " ]] ||
    fail "the plugin exports '$exported', not just distcomm_backend_plugin_v1 and its declaration"
  check_bin="$prefix/bin/distcomm-backend-check"
  [[ -x "$check_bin" ]] || fail "distcomm-backend-check was not installed in $prefix/bin"
  [[ -n "$distcomm_run" ]] || fail "--distcomm-run is needed to run the ranks"

  for np in 2 3; do
    step "the installed distcomm-backend-check on it, $np processes, DISTCOMM_BACKEND=tcp"
    DISTCOMM_BACKEND=tcp DISTCOMM_PLUGIN_PATH="$(dirname "$plugin")" \
      "$distcomm_run" -np "$np" --timeout 150 "$check_bin" >"$tmp/check-np$np.log" 2>&1 ||
      { cat "$tmp/check-np$np.log"; fail "the backend suite failed on the tcp plugin at $np ranks"; }
    [[ "$(grep -c 'Status: SUCCESS' "$tmp/check-np$np.log")" == "$np" ]] ||
      { cat "$tmp/check-np$np.log"; fail "not every one of $np ranks reported success"; }
    grep -m 1 'test cases:' "$tmp/check-np$np.log"
  done
  echo
  echo "packaging: OK (the tcp plugin built out of the tree against the install, loaded by name," \
    "passed the backend suite at 2 and 3 ranks)"
  exit 0
fi

if [[ "$check" == test_package ]]; then
  step "static checks of the vcpkg port, the Conan recipe and test_package against the export"
  # Reported at the end: the build below is worth running whatever these find.
  recipes_rc=0
  "$python" "$here/check_recipes.py" --source-dir "$source_dir" --prefix "$prefix" || recipes_rc=$?

  step "configure, build and run test_package/ (the Conan test project) with plain CMake"
  bin="$(build_against_prefix "$source_dir/test_package" test_package test_package)"
  "$bin"
  ((recipes_rc == 0)) || fail "check_recipes.py found inconsistencies (FAIL lines above)"
  echo
  echo "packaging: OK (recipes consistent with the export; test_package built and ran)"
  exit 0
fi

# ---- --check pkgconfig ------------------------------------------------------------------------
command -v pkg-config >/dev/null 2>&1 || fail "pkg-config is not installed"
pc_dir="$prefix/$pkgconfig_dir"
[[ -d "$pc_dir" ]] || fail "no $pc_dir: the install wrote no pkg-config modules"
export PKG_CONFIG_PATH="$pc_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"

step "one valid module per built component and distcomm-all, naming the prefix installed to"
modules=()
for component in "${components[@]}"; do
  case "$component" in
    core) modules+=(distcomm) ;;
    local) ;;  # in distcomm.pc, with core
    *) modules+=("distcomm-$component") ;;
  esac
done
modules+=(distcomm-all)  # the umbrella DistComm::DistComm
for module in "${modules[@]}"; do
  [[ -f "$pc_dir/$module.pc" ]] ||
    fail "component module $module.pc is missing from $pc_dir (add cmake/$module.pc.in)"
  # --validate also parses the modules it requires; their own warnings are not ours.
  pkg-config --validate "$module" 2>"$tmp/validate.log" ||
    { cat "$tmp/validate.log"; fail "pkg-config --validate $module"; }
  # (stderr dropped: pkg-config repeats the required modules' warnings on every query)
  found="$(pkg-config --variable=pcfiledir "$module" 2>/dev/null)"
  [[ "$found" == "$pc_dir" ]] || fail "pkg-config resolves $module to '$found', not $pc_dir"
  found="$(pkg-config --variable=prefix "$module" 2>/dev/null)"
  [[ "$found" == "$prefix" ]] || fail "$module.pc has prefix=$found, installed to $prefix"
  [[ "$(pkg-config --modversion "$module" 2>/dev/null)" == "$(pkg-config --modversion distcomm)" ]] ||
    fail "$module and distcomm differ in version"
  printf '%-14s %s\n' "$module:" "$(pkg-config --cflags --libs "$module" 2>/dev/null)"
done

# A shared DistComm in a prefix outside the loader's path: the programs below find it this way.
libdir="$(pkg-config --variable=libdir distcomm)"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# distcomm-init and distcomm-all require the modules of what their CMake targets link
# (DistComm::init, DistComm::DistComm): every backend and the plugin loader for both.
requires_of() {  # requires_of MODULE -> the modules it requires, sorted, on one line
  pkg-config --print-requires "$1" 2>/dev/null | awk '{print $1}' | sort | tr '\n' ' '
}
expected_init=(distcomm distcomm-plugin)
for component in "${components[@]}"; do
  case "$component" in
    core|local|cuda|plugin_abi|plugin|init) ;;
    *) expected_init+=("distcomm-$component") ;;
  esac
done
expected_init_text="$(printf '%s\n' "${expected_init[@]}" | sort | tr '\n' ' ')"
[[ "$(requires_of distcomm-init)" == "$expected_init_text" ]] ||
  fail "distcomm-init requires '$(requires_of distcomm-init)', not every backend and the loader" \
    "('$expected_init_text')"
# Everything distcomm-init has, and the CUDA layer where it was built.
expected_all=(distcomm distcomm-init distcomm-plugin)
has_component cuda && expected_all+=(distcomm-cuda)
expected_all_text="$(printf '%s\n' "${expected_all[@]}" | sort | tr '\n' ' ')"
[[ "$(requires_of distcomm-all)" == "$expected_all_text" ]] ||
  fail "distcomm-all requires '$(requires_of distcomm-all)', not '$expected_all_text'"

step "compile test_package/test_package.cpp with \$(pkg-config --cflags --libs distcomm), run it"
# shellcheck disable=SC2046  # pkg-config's output is meant to split into flags
"$cxx" "${compile_flags[@]}" "$source_dir/test_package/test_package.cpp" \
  $(pkg-config --cflags --libs distcomm) -o "$tmp/test_package"
"$tmp/test_package"

# hello.cpp needs CLI11 for its options; CLI11 ships a pkg-config module too.
pkg-config --exists CLI11 || fail "pkg-config module CLI11 not found (libcli11-dev installs it)"

step "compile examples/hello/hello.cpp with \$(pkg-config --cflags distcomm-init CLI11)"
# shellcheck disable=SC2046  # as above
"$cxx" "${compile_flags[@]}" -c "$source_dir/examples/hello/hello.cpp" \
  $(pkg-config --cflags distcomm-init CLI11 2>/dev/null) -o "$tmp/hello.o"
for module in distcomm-all distcomm-init; do
  step "link it with \$(pkg-config --libs $module CLI11), run --np 2"
  # shellcheck disable=SC2046  # as above
  "$cxx" "${compile_flags[@]}" "$tmp/hello.o" $(pkg-config --libs "$module" CLI11 2>/dev/null) \
    -o "$tmp/hello-$module"
  "$tmp/hello-$module" --np 2 | tee "$tmp/hello-$module.out"
  [[ "$(grep -c ' ok (backend local' "$tmp/hello-$module.out")" == 2 ]] ||
    fail "hello linked with $module, --np 2, did not report 2 ranks ok"
done
cp "$tmp/hello-distcomm-init" "$tmp/hello"

step "build plugins/examples/tcp with \$(pkg-config --cflags distcomm-plugin_abi) alone"
plugin_src="$source_dir/plugins/examples/tcp"
mkdir -p "$tmp/plugins"
# As its CMakeLists.txt builds it: hidden symbols, the ABI's entry point alone exported.
# shellcheck disable=SC2046  # as above
"$cxx" "${compile_flags[@]}" -std=c++17 -shared -fPIC -fvisibility=hidden \
  -fvisibility-inlines-hidden $(pkg-config --cflags distcomm-plugin_abi) \
  "$plugin_src/tcp_plugin.cpp" "-Wl,--version-script=$plugin_src/export.map" \
  -o "$tmp/plugins/libdistcomm_backend_tcp.so"
[[ -d "$(pkg-config --variable=plugindir distcomm-plugin_abi)" ]] ||
  fail "distcomm-plugin_abi's plugindir '$(pkg-config --variable=plugindir distcomm-plugin_abi)'" \
    "is not the installation's plugin folder"
transports=(tcp)  # the plugin, loaded by distcomm::init() through distcomm-init's loader
for t in mpi gloo ucx; do has_component "$t" && transports+=("$t"); done
export DISTCOMM_PLUGIN_PATH="$tmp/plugins"

for t in "${transports[@]}"; do
  step "run hello as 2 processes on $t"
  if [[ "$t" == mpi ]]; then
    [[ -n "$mpiexec" ]] || { echo "no mpiexec given: the mpi build was linked, not run"; continue; }
    # As tests/mpi does: shared memory only (containers have no CMA), root allowed.
    timeout 60 "$mpiexec" --allow-run-as-root --oversubscribe --mca btl self,vader \
      --mca btl_vader_single_copy_mechanism none -np 2 "$tmp/hello" --backend mpi \
      | tee "$tmp/hello-$t.out"
  else
    [[ -n "$distcomm_run" ]] || fail "--distcomm-run is needed to run the $t build"
    "$distcomm_run" -np 2 --timeout 60 "$tmp/hello" --backend "$t" | tee "$tmp/hello-$t.out"
  fi
  [[ "$(grep -c " ok (backend $t" "$tmp/hello-$t.out")" == 2 ]] ||
    fail "hello --backend $t did not report 2 ranks ok"
done
echo
echo "packaging: OK (pkg-config modules valid and relocated; test_package built from distcomm," \
  "hello from distcomm-init and distcomm-all, run on: local ${transports[*]})"
