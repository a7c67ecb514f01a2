#!/bin/sh
# plot.sh smoke test: a tiny local sweep written as CSV and JSON, plotted into one PNG (checked by
# its signature), and the errors for an empty file and a --profile CSV. Exit code 77 (skipped)
# when gnuplot or python3 is missing.
#   plot_test.sh BENCH PLOT_SH
bench=$1 plot=$2
for tool in gnuplot:gnuplot-nox python3:python3; do
  if ! command -v "${tool%%:*}" >/dev/null 2>&1; then
    echo "SKIP: ${tool%%:*} is not installed (Debian package ${tool#*:})"
    exit 77
  fi
done
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "plot_test: $*" >&2
  exit 1
}

"$bench" -np 2 -b 8 -e 64K -f 8 -n 1 -w 0 -c 0 --csv "$dir/run.csv" --json "$dir/run.json" \
  >/dev/null || fail "the sweep failed"
"$plot" -o "$dir/run.png" "$dir/run.csv" "$dir/run.json" || fail "plot.sh failed"
signature=$(od -An -tx1 -N8 "$dir/run.png" | tr -d ' \n')
[ "$signature" = 89504e470d0a1a0a ] || fail "run.png lacks the PNG signature (starts $signature)"
echo "run.png: $(wc -c <"$dir/run.png") bytes, PNG signature OK"

# expect_error FILE MESSAGE: plot.sh must fail on FILE, say MESSAGE and write no PNG.
expect_error() {
  if "$plot" -o "$dir/bad.png" "$1" 2>"$dir/err"; then fail "plot.sh accepted $1"; fi
  grep -q "$2" "$dir/err" || fail "plot.sh on $1 said '$(cat "$dir/err")', not '$2'"
  [ ! -e "$dir/bad.png" ] || fail "plot.sh wrote a PNG from $1"
  echo "$1: refused ($(cat "$dir/err"))"
}
: >"$dir/empty.csv"
expect_error "$dir/empty.csv" "empty"
# The header a --profile run's CSV starts with.
printf '%s%s\n' "program,backend,strategy,collective,ranks,type,redop," \
  "mode,tensors,collectives,time_us,algbw_GBps,busbw_GBps,wrong" >"$dir/profile.csv"
expect_error "$dir/profile.csv" "a --profile run"
