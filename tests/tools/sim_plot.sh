#!/bin/sh
# distcomm-sim step --csv, then tools/sim/plot.sh on it: passes when the CSV has a row per rank
# count and strategy and the PNG is written; skips (77) without gnuplot; a file that is not such
# a CSV is refused with exit code 2.
# usage: sim_plot.sh DISTCOMM_SIM PLOT_SH PROFILE
set -u
[ $# -eq 3 ] || { echo "usage: sim_plot.sh DISTCOMM_SIM PLOT_SH PROFILE" >&2; exit 2; }
command -v gnuplot >/dev/null 2>&1 || { echo "skipped: gnuplot is not installed"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/distcomm-sim-plot.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
"$1" step --machine 25gbe-4gpu --profile "$3" --backward-ms 120 --ranks 4,8,16 \
  --csv "$work/s.csv" >/dev/null || { echo "FAIL: distcomm-sim step --csv"; exit 1; }
rows=$(($(wc -l <"$work/s.csv") - 1))
# 4 ranks: one node, 4 strategies; 8 and 16: 5 with hierarchical.
[ "$rows" -eq 14 ] || { cat "$work/s.csv"; echo "FAIL: $rows rows, not 14"; exit 1; }
sh "$2" -o "$work/s.png" -t "test" "$work/s.csv" || { echo "FAIL: plot.sh"; exit 1; }
[ -s "$work/s.png" ] || { echo "FAIL: no PNG"; exit 1; }
echo "not,a,csv" >"$work/bad.csv"
sh "$2" -o "$work/bad.png" "$work/bad.csv" 2>"$work/err"
[ $? -eq 2 ] && grep -q "is not a distcomm-sim step --csv file" "$work/err" ||
  { cat "$work/err"; echo "FAIL: a bad file was not refused"; exit 1; }
echo PASS
