#!/usr/bin/env bash
# run.sh: build one libFuzzer target with clang in its own tree, replay the inputs that once
# crashed it, then fuzz it for a bounded time from its seed corpus. What ctest -L fuzz runs.
#
# usage: fuzz/run.sh --target NAME --corpus NAME [--time SECONDS] [--source DIR] [--build DIR]
#                    [--cmake PATH] [--generator NAME]
#   --target     the fuzz target (fuzz/CMakeLists.txt), e.g. fuzz_world
#   --corpus     the folder name under fuzz/corpus/ and fuzz/regressions/, e.g. world
#   --time       seconds of fuzzing (default 20); each input may take at most 5 s
#   --source     the repository root (default: this script's parent)
#   --build      the clang build tree (default: <source>/build/fuzz-build)
# Exits 77 (ctest: skipped) when clang++ (or $DISTCOMM_FUZZ_CXX) cannot build a libFuzzer
# program, 1 on any finding, with the crashing input saved under <build>/artifacts-<corpus>/.
set -euo pipefail

source_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="" cmake="cmake" generator="" target="" corpus="" seconds=20
while (($#)); do
  case "$1" in
    --source) source_dir="$2"; shift 2 ;;
    --build) build_dir="$2"; shift 2 ;;
    --cmake) cmake="$2"; shift 2 ;;
    --generator) generator="$2"; shift 2 ;;
    --target) target="$2"; shift 2 ;;
    --corpus) corpus="$2"; shift 2 ;;
    --time) seconds="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$target" && -n "$corpus" ]] || { echo "run.sh: --target and --corpus are required" >&2; exit 2; }
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --time wants whole seconds" >&2; exit 2; }
build_dir="${build_dir:-$source_dir/build/fuzz-build}"
cxx="${DISTCOMM_FUZZ_CXX:-clang++}"
seeds="$source_dir/fuzz/corpus/$corpus"
regressions="$source_dir/fuzz/regressions/$corpus"
[[ -d "$seeds" ]] || { echo "run.sh: no seed corpus $seeds" >&2; exit 2; }

# Can this compiler link a libFuzzer program at all? (clang without libclang-rt: skip.)
probe_dir="$(mktemp -d)"
trap 'rm -rf "$probe_dir"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
  >"$probe_dir/probe.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cpp" -o "$probe_dir/probe" \
  >"$probe_dir/log" 2>&1; then
  echo "run.sh: $cxx cannot build a libFuzzer program; skipped:"
  sed 's/^/  /' "$probe_dir/log" | head -5
  exit 77
fi

generator_args=()
[[ -n "$generator" ]] && generator_args=(-G "$generator")
"$cmake" -S "$source_dir/fuzz" -B "$build_dir" "${generator_args[@]}" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
"$cmake" --build "$build_dir" --target "$target" -j "$(nproc 2>/dev/null || echo 2)"
fuzzer="$build_dir/$target"

artifacts="$build_dir/artifacts-$corpus"
mkdir -p "$artifacts"
found() {
  echo "run.sh: $target found a failure; the input is in $artifacts/."
  echo "  Fix it, then keep the input as a regression: cp $artifacts/crash-* $regressions/"
  exit 1
}

# 1. Every input that once crashed must now pass (libFuzzer runs files given by name once).
mapfile -t cases < <(find "$regressions" -type f ! -name 'README*' 2>/dev/null | sort)
if ((${#cases[@]})); then
  echo "run.sh: replaying ${#cases[@]} regression input(s) from $regressions"
  "$fuzzer" -timeout=5 -artifact_prefix="$artifacts/" "${cases[@]}" || found
else
  echo "run.sh: no regression inputs in $regressions"
fi

# 2. Fuzz for a bounded time. New inputs go to a scratch corpus in the build tree (the first
#    directory); the committed seeds are only read.
#    fuzz/<target>.dict, when there is one, lists the tokens the parser looks for.
work="$build_dir/corpus-$corpus"
rm -rf "$work"
mkdir -p "$work"
dict=()
[[ -f "$source_dir/fuzz/$target.dict" ]] && dict=(-dict="$source_dir/fuzz/$target.dict")
"$fuzzer" -max_total_time="$seconds" -timeout=5 -max_len=4096 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$artifacts/" "${dict[@]}" "$work" "$seeds" || found
echo "run.sh: $target: no failure in ${seconds}s"
