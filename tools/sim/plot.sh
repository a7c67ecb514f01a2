#!/bin/sh
# Plots scaling efficiency against rank count from distcomm-sim step --csv files: one line per
# profile and strategy, log-scale rank axis, PNG out.
#
#   tools/sim/plot.sh -o scaling.png [-t TITLE] run1.csv run2.csv ...
#
# Needs awk and gnuplot with the pngcairo terminal (Debian: gnuplot-nox).
set -u

usage() {
  echo "usage: plot.sh -o OUT.png [-t TITLE] FILE.csv..." >&2
  exit 2
}
out='' title='distcomm-sim: predicted scaling efficiency'
while [ $# -gt 0 ]; do
  case $1 in
    -o) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
    -t) [ $# -ge 2 ] || usage; title=$2; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    -*) usage ;;
    *) break ;;
  esac
done
[ -n "$out" ] && [ $# -ge 1 ] || usage
command -v gnuplot >/dev/null 2>&1 ||
  { echo "plot.sh: gnuplot not found: install it (Debian: apt-get install gnuplot-nox)" >&2; exit 2; }
for f in "$@"; do
  head -1 "$f" 2>/dev/null | grep -q '^profile,ranks,strategy,step_ms,efficiency,' ||
    { echo "plot.sh: $f is not a distcomm-sim step --csv file" >&2; exit 2; }
done

script=$(mktemp) || exit 1
trap 'rm -f "$script"' EXIT
# One inline data block per (profile, strategy), in the order they first appear.
awk -F, -v out="$out" -v title="$title" '
  FNR == 1 { next }
  {
    n = split($1, parts, "/"); name = parts[n]; sub(/\.txt$/, "", name)
    key = name " " $3
    if (!(key in seen)) { seen[key] = ++keys; order[keys] = key }
    data[key] = data[key] $2 " " ($5 * 100) "\n"
  }
  END {
    print "set terminal pngcairo noenhanced size 900,560 font \",10\""
    print "set output \"" out "\""
    print "set title \"" title "\""
    print "set logscale x 2"
    print "set xlabel \"ranks\""
    print "set ylabel \"scaling efficiency (%)\""
    print "set yrange [0:105]"
    print "set grid"
    print "set key outside right"
    for (i = 1; i <= keys; i++) {
      k = order[i]; gsub(/[^A-Za-z0-9]/, "_", k)
      print "$d" k " << EOD"; printf "%s", data[order[i]]; print "EOD"
    }
    printf "plot"
    for (i = 1; i <= keys; i++) {
      k = order[i]; gsub(/[^A-Za-z0-9]/, "_", k)
      printf "%s $d%s using 1:2 with linespoints title \"%s\"", (i > 1 ? "," : ""), k, order[i]
    }
    print ""
  }' "$@" >"$script" || exit 1
gnuplot "$script" || { echo "plot.sh: gnuplot failed" >&2; exit 1; }
echo "plot.sh: wrote $out"
