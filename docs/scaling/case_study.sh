#!/bin/sh
# Remakes docs/scaling/case_study.png: the cost model on the case study's setting (docs/SCALING.md,
# "The case study's setting"): 4 GPUs per node over 25 Gbit/s (--machine 25gbe-4gpu), the
# single-GPU step of 64 images at Horovod's measured rates (Inception V3 134.4, ResNet-101 119.4,
# VGG-16 130.9 images/s), one third forward, two thirds backward; Horovod's ring (fused 64 MB,
# cycle 5 ms) against TensorFlow-style parameter servers (one per node, whole tensors).
#   docs/scaling/case_study.sh [BUILD_DIR [OUT.png]]   # default: build, this folder's PNG
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
sim=${1:-$root/build}/bin/distcomm-sim
png=${2:-$here/case_study.png}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for model in inception_v3:476 resnet101:536 vgg16:489; do
  name=${model%%:*} step=${model#*:}
  forward=$(awk -v s="$step" 'BEGIN { printf "%.1f", s / 3 }')
  backward=$(awk -v s="$step" 'BEGIN { printf "%.1f", s * 2 / 3 }')
  set -- --machine 25gbe-4gpu --profile "$root/bench/profiles/$name.txt" \
    --forward-ms "$forward" --backward-ms "$backward" --ranks 1,2,4,8,16,32,64,128
  "$sim" step "$@" --strategy ring --fusion 64M --cycle-ms 5 --csv "$work/$name.ring.csv"
  "$sim" step "$@" --strategy ps --ps-servers 0 --ps-placement tensors \
    --csv "$work/$name.ps.csv"
done
sh "$root/tools/sim/plot.sh" -o "$png" \
  -t "predicted: ring (fused 64 MB) against parameter servers (1 per node), 4 GPUs/node, 25 Gb/s" \
  "$work"/*.ring.csv "$work"/*.ps.csv
