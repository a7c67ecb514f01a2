# shellcheck shell=bash disable=SC2034,SC2154  # sets the caller's variables; reads its `here`
# Shared by bench/figures.sh and bench/targets.sh (sourced, not run): their options and the
# executables they need. The calling script sets `here` (its own folder) first.

# round_options NAME OUT ROUNDS "$@": reads -B BUILD, -o OUT, -r ROUNDS (defaults: ../build, OUT,
# ROUNDS), -h for the calling script's header; sets build, out, rounds and bin.
round_options() {
  local name="$1" opt OPTIND=1
  out="$2"
  rounds="$3"
  shift 3
  build="$here/../build"
  while getopts "B:o:r:h" opt; do
    case "$opt" in
      B) build="$OPTARG" ;;
      o) out="$OPTARG" ;;
      r) rounds="$OPTARG" ;;
      *) sed -n '2,/^set /{/^#/p}' "$0"; exit 2 ;;
    esac
  done
  [[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "$name: -r wants a positive number" >&2; exit 2; }
  bin="$build/bin"
}

# require_built NAME EXE...: each EXE in $bin, else exit 2 naming the one missing.
require_built() {
  local name="$1" exe
  shift
  for exe in "$@"; do
    [[ -x "$bin/$exe" ]] || { echo "$name: $bin/$exe not built" >&2; exit 2; }
  done
}
