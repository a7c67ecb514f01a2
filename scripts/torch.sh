#!/usr/bin/env bash
# Makes (or reuses) a Python virtual environment with PyTorch VERSION from PyPI and prints the path
# of its interpreter, alone, on stdout; what it does goes to stderr.
#
# usage: scripts/torch.sh [VERSION | --newest | --all | --list]
#   VERSION    a version pinned in scripts/pypi.txt (2.15.0, or a prefix of one: 2.15); 1.13 is
#              Debian's python3-torch and prints /usr/bin/python3
#   --newest   the newest pinned version (the default)
#   --all      every pinned version, one interpreter per line
#   --list     the pinned versions, one per line
#
# The environments live outside the clone, in ${DISTCOMM_CACHE:-~/.cache/distcomm}/torch-VERSION,
# made from Debian's /usr/bin/python3 (whose headers, python3-dev, the binding builds against), so
# that a rerun downloads nothing. An environment is reused only when it was finished with the pins
# it would be made with now (its distcomm-pins file); else it is made afresh. A torch wheel from
# PyPI is a CUDA build (about 4 GB with its nvidia-* packages) that runs on the CPU.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
exec 3>&1 1>&2   # everything but the interpreter's path to stderr

want="--newest"
if (($#)); then want="$1"; shift; fi
(($# == 0)) || die "torch.sh takes one argument (see --help)"
case "$want" in
  -h|--help) sed -n '2,/^set -euo/{/^#/p}' "$0"; exit 0 ;;
esac

pins="$DISTCOMM_ROOT/scripts/pypi.txt"
mapfile -t versions < <(sed -n 's/^torch==\([0-9.]*\)[[:space:]]*$/\1/p' "$pins")
((${#versions[@]})) || die "$pins pins no torch version (lines 'torch==X.Y.Z')"
# The constraints every environment installs with: the pins but torch's.
constraints="$(grep -E '^[A-Za-z0-9_.-]+==' "$pins" | grep -v '^torch==')"

# make_env VERSION: the environment's interpreter on fd 3, made if it is not there.
make_env() {
  local version="$1"
  local cache="${DISTCOMM_CACHE:-$HOME/.cache/distcomm}"
  local dir="$cache/torch-$version"
  local stamp
  stamp="$(printf 'torch==%s\n%s\n' "$version" "$constraints")"
  if [[ -x "$dir/bin/python" && -f "$dir/distcomm-pins" && "$(cat "$dir/distcomm-pins")" == "$stamp" ]]; then
    log "torch $version: reusing $dir"
    echo "$dir/bin/python" >&3
    return 0
  fi
  [[ -x /usr/bin/python3 ]] || die "no /usr/bin/python3 (Debian's python3, python3-venv, python3-dev)"
  ensure_packages python3 python3-venv python3-dev
  log "torch $version: making $dir (downloads torch and its nvidia-* packages, about 4 GB)"
  rm -rf "$dir"
  mkdir -p "$cache"
  /usr/bin/python3 -m venv "$dir" || die "python3 -m venv $dir failed (python3-venv)"
  local cfile="$dir/distcomm-constraints.txt"
  printf '%s\n' "$constraints" >"$cfile"
  local names
  names="$(sed 's/==.*//' "$cfile" | tr '\n' ' ')"
  # The pip cache would hold a second copy of every wheel: the environment is the cache.
  # shellcheck disable=SC2086
  "$dir/bin/pip" install --no-cache-dir --disable-pip-version-check -q -c "$cfile" \
      "torch==$version" $names ||
    die "pip could not install torch==$version into $dir (is PyPI reachable?)"
  "$dir/bin/python" -c 'import torch, torch.distributed as d; assert d.is_available()' ||
    die "torch $version was installed into $dir but does not import"
  printf '%s\n' "$stamp" >"$dir/distcomm-pins"
  log "torch $version: ready ($(du -sh "$dir" | cut -f1))"
  echo "$dir/bin/python" >&3
}

# resolve VERSION: the pinned version VERSION names (itself, or the one it is a prefix of).
resolve() {
  local v match=()
  for v in "${versions[@]}"; do
    [[ "$v" == "$1" || "$v" == "$1".* ]] && match+=("$v")
  done
  ((${#match[@]} == 1)) ||
    die "torch $1 is not pinned in scripts/pypi.txt (pinned: ${versions[*]}; 1.13 is Debian's)"
  echo "${match[0]}"
}

case "$want" in
  --list) printf '%s\n' 1.13 "${versions[@]}" >&3 ;;
  --all) for v in "${versions[@]}"; do make_env "$v"; done ;;
  --newest) make_env "${versions[-1]}" ;;
  1.13|1.13.*)
    ensure_packages python3 python3-torch python3-pybind11 python3-dev libtorch-dev
    echo /usr/bin/python3 >&3 ;;
  -*) die "unknown option '$want' (see --help)" ;;
  *) make_env "$(resolve "$want")" ;;
esac
