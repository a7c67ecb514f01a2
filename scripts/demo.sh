#!/usr/bin/env bash
# Builds DistComm and runs the training example: distcomm-run starts distcomm-train-mlp as 4
# local processes with the default backend (DISTCOMM_BACKEND if set, else gloo), which train a
# small multi-layer perceptron on synthetic data, averaging the gradients with one grouped
# allreduce per step. Prints the loss and accuracy of every epoch, then a summary; fails if the
# model did not reach 90% test accuracy.
#
# usage: scripts/demo.sh [-j N]
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

while (($#)); do
  case "$1" in
    -j) [[ $# -ge 2 ]] || die "-j needs a number"; DISTCOMM_JOBS="$2"; shift 2 ;;
    -j*) DISTCOMM_JOBS="${1#-j}"; shift ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
cd "$DISTCOMM_ROOT"

ensure_packages "${DISTCOMM_PACKAGES[@]}"
configure_tree build -DDISTCOMM_BUILD_EXAMPLES=ON >/dev/null
build_tree build --target distcomm_train_mlp distcomm_run

np=4
out="$(mktemp "${TMPDIR:-/tmp}/distcomm-demo.XXXXXX")"
trap 'rm -f "$out"' EXIT
log "running build/bin/distcomm-run -np $np build/bin/distcomm-train-mlp"
# The defaults: 10 epochs of 4096 samples, global batch 4 x 32; 2-4 s on 2 cores.
build/bin/distcomm-run -np "$np" --timeout 300 build/bin/distcomm-train-mlp | tee "$out"
summary="$(awk '
  / backend / && !backend { for (i = 1; i < NF; ++i) if ($i == "backend") backend = $(i + 1) }
  /^epoch/ { if (first == "") first = $4; last = $4 }
  /^final:/ { accuracy = $4 }
  END { sub(/,$/, "", backend); print backend, first, last, accuracy }' "$out")"
read -r backend first_loss last_loss accuracy <<<"$summary"
echo
echo "demo: $np processes (backend $backend) trained one model, averaging gradients after every" \
     "step; the loss fell from $first_loss (epoch 1) to $last_loss, final test accuracy $accuracy."
awk -v a="${accuracy%\%}" 'BEGIN { exit !(a + 0 >= 90) }' ||
  die "the model reached only $accuracy test accuracy (expected at least 90%)"
