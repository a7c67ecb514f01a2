#!/bin/sh
# Plots bus bandwidth against message size from the --csv and --json files of distcomm-bench-*
# sweeps: one line per backend and strategy (and per peer), log-scale size axis, PNG out.
#
#   bench/plot.sh -o out.png run1.csv run2.json ...
#   bench/plot.sh --help
#
# Needs python3 (standard library: reads the files, writes the gnuplot script) and gnuplot with
# the pngcairo terminal (Debian: gnuplot-nox).
set -u

for tool in python3:python3 gnuplot:gnuplot-nox; do
  if ! command -v "${tool%%:*}" >/dev/null 2>&1; then
    echo "plot.sh: ${tool%%:*} not found: install it (Debian: apt-get install ${tool#*:})" >&2
    exit 2
  fi
done

script=$(mktemp) || exit 1
trap 'rm -f "$script"' EXIT

# The reader writes the whole gnuplot script (data inline) to $script; usage and input errors
# end here with exit code 2 and the reason on stderr.
python3 - "$script" "$@" <<'PYTHON' || exit $?
import argparse, csv, io, json, os, sys

parser = argparse.ArgumentParser(
    prog="plot.sh",
    description="Plot busbw against size from distcomm-bench-* --csv / --json files (sweeps; "
                "--profile results have no size axis and are refused).")
parser.add_argument("-o", "--output", required=True, metavar="PNG", help="the PNG to write")
parser.add_argument("--out-of-place", action="store_true",
                    help="plot the out-of-place busbw (default: in-place, the column every "
                         "collective and --fusion-tensors has, and the one --peer compares with)")
parser.add_argument("--log-y", action="store_true", help="log-scale busbw axis too")
parser.add_argument("--title", help="plot title (default: the settings all lines share)")
parser.add_argument("--size", default="1000,600", metavar="W,H", help="pixels (default 1000,600)")
parser.add_argument("files", nargs="+", metavar="FILE", help="CSV or JSON written by --csv/--json")
args = parser.parse_args(sys.argv[2:])
column = "out_of_place" if args.out_of_place else "in_place"


def fail(message):
    sys.exit("plot.sh: " + message)


try:
    width, height = (int(v) for v in args.size.split(","))
except ValueError:
    fail("--size %s: expected W,H in pixels" % args.size)


def number(text, where):
    try:
        return float(text)
    except ValueError:
        fail("%s: '%s' is not a number" % (where, text))


# One run's settings as label parts: the first names the line, the others go to the title when
# every line shares them.
def settings(backend, strategy, collective, ranks, dtype, redop, fusion=1):
    fusion_part = "fusion-tensors %s" % fusion if str(fusion) not in ("1", "None") else ""
    return [backend + " " + strategy, collective, "np %s" % ranks, dtype, redop, fusion_part]


def peer_settings(run, peer):
    # Named after its run too: the same peer beside two backends makes two lines.
    return ["peer %s (%s)" % (peer, run[0])] + run[1:]


# series: (label parts, file) -> {size: [busbw, ...]}
series = {}


def add(parts, path, size, busbw):
    if size <= 0:
        return  # a log-scale axis has no place for it
    series.setdefault((tuple(parts), path), {}).setdefault(size, []).append(busbw)


def read_json(path, text):
    try:
        j = json.loads(text)
    except ValueError as e:
        fail("%s: not valid JSON (%s)" % (path, e))
    if not isinstance(j, dict) or "results" not in j or "backend" not in j:
        fail("%s: not a distcomm-bench --json file (no 'backend' and 'results')" % path)
    if not j["results"]:
        if j.get("profile"):
            fail("%s: a --profile run: it has no size axis to plot" % path)
        fail("%s: no results" % path)
    run = settings(j["backend"], j["strategy"], j["collective"], j["ranks"], j["datatype"],
                   j["redop"], j.get("fusion_tensors", 1))
    for r in j["results"]:
        block = r.get(column)
        if block:
            add(run, path, r["size"], block["busbw_GBps"])
        if j.get("peer") and r.get("peer"):
            add(peer_settings(run, j["peer"]), path, r["size"], r["peer"]["busbw_GBps"])


def read_csv(path, text):
    # Files of several runs may be concatenated: every header line starts a run (with or without
    # the peer columns).
    prefix = "oop" if args.out_of_place else "ip"
    header = None
    rows = 0
    for line_number, cells in enumerate(csv.reader(io.StringIO(text)), start=1):
        where = "%s:%d" % (path, line_number)
        if not cells:
            continue
        if cells[0] == "program":
            header = cells
            if "size" not in header:
                if "mode" in header:
                    fail("%s: a --profile run: it has no size axis to plot" % where)
                fail("%s: no 'size' column: not a distcomm-bench sweep" % where)
            continue
        if header is None:
            fail("%s: no header line (program,backend,...): not a distcomm-bench --csv file"
                 % where)
        if len(cells) != len(header):
            fail("%s: %d cells, the header has %d" % (where, len(cells), len(header)))
        c = dict(zip(header, cells))
        run = settings(c["backend"], c["strategy"], c["collective"], c["ranks"], c["type"],
                       c["redop"])
        size = int(number(c["size"], where))
        if c[prefix + "_busbw_GBps"]:
            add(run, path, size, number(c[prefix + "_busbw_GBps"], where))
        if c.get("peer") and c.get("peer_busbw_GBps"):
            add(peer_settings(run, c["peer"]), path, size, number(c["peer_busbw_GBps"], where))
        rows += 1
    if header is None:
        fail("%s: no header line (program,backend,...): not a distcomm-bench --csv file" % path)
    if rows == 0:
        fail("%s: no results" % path)


for path in args.files:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        fail("%s: cannot read (%s)" % (path, e))
    if not text.strip():
        fail("%s: empty" % path)
    (read_json if text.lstrip().startswith("{") else read_csv)(path, text)
if not series:
    fail("no %s busbw in %s (try %s)" % (column.replace("_", "-"), " ".join(args.files),
                                        "without --out-of-place" if args.out_of_place
                                        else "--out-of-place"))

# Labels: the line's name plus whichever settings differ between lines; the shared ones title
# the plot. The same label from two files gets the file's name (cycles of one run, -N, and
# repeated sizes in one file are averaged into one point).
keys = list(series)
shared = [all(k[0][i] == keys[0][0][i] for k in keys) for i in range(len(keys[0][0]))]
labels = [", ".join(p for i, p in enumerate(k[0]) if p and (i == 0 or not shared[i]))
          for k in keys]
for i, k in enumerate(keys):
    if labels.count(labels[i]) > 1:
        labels[i] += " (" + os.path.basename(k[1]) + ")"
title = args.title
if title is None:
    title = ", ".join(p for i, p in enumerate(keys[0][0]) if i > 0 and p and shared[i])
    title = (title + ": " if title else "") + column.replace("_", "-") + " bus bandwidth"


def quoted(text):
    return "'" + text.replace("'", "''") + "'"


out = ["set terminal pngcairo noenhanced size %d,%d" % (width, height),
       "set output " + quoted(args.output),
       "set title " + quoted(title),
       "set logscale x 2",
       "set format x '%.0b%BB'",
       "set xlabel 'message size'",
       "set ylabel 'busbw (GB/s)'",
       "set logscale y 10" if args.log_y else "set yrange [0:*]",
       "set grid",
       "set key below height 1"]
for i, k in enumerate(keys):
    out.append("$s%d << EOD" % i)
    out += ["%d %.6g" % (size, sum(v) / len(v)) for size, v in sorted(series[k].items())]
    out.append("EOD")
out.append("plot " + ", \\\n     ".join("$s%d using 1:2 with linespoints linewidth 2 title %s"
                                       % (i, quoted(labels[i])) for i in range(len(keys))))
with open(sys.argv[1], "w") as f:
    f.write("\n".join(out) + "\n")
PYTHON

gnuplot "$script" || {
  echo "plot.sh: gnuplot failed (its message is above)" >&2
  exit 1
}
