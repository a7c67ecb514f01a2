#!/bin/sh
# DISTCOMM_TIMELINE on a real job, then distcomm-timeline merge: each rank writes a trace that is
# valid JSON with the engine's phases; the merged file holds every rank's events; a file cut short
# (a rank killed before closing it) is still read, with a warning.
# usage: timeline_merge.sh <distcomm-run> <distcomm-train-mlp> <distcomm-timeline> <python3>
set -eu
run="$1" trainer="$2" merge="$3" python="$4"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
DISTCOMM_TIMELINE="$dir/tl.%r.json" "$run" -np 2 --timeout 60 "$trainer" --epochs 1 --samples 512 \
  >/dev/null
"$merge" merge -o "$dir/all.json" "$dir/tl.0.json" "$dir/tl.1.json"
"$python" - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
for r in (0, 1):
    events = json.load(open(f"{d}/tl.{r}.json"))["traceEvents"]
    names = {e["name"] for e in events}
    for phase in ("negotiate", "allreduce", "grouped allreduce", "pack", "unpack", "W1", "b3"):
        assert phase in names, f"rank {r}: no '{phase}' event"
    assert all(e["pid"] == r for e in events), f"rank {r}: an event of another rank"
merged = json.load(open(f"{d}/all.json"))["traceEvents"]
assert {e["pid"] for e in merged} == {0, 1}, "the merged trace lacks a rank"
print("timeline: both ranks' traces parse and hold every phase; merged:", len(merged), "events")
PY
# A trace cut short mid-event.
head -c 2000 "$dir/tl.1.json" > "$dir/cut.json"
"$merge" merge -o "$dir/some.json" "$dir/tl.0.json" "$dir/cut.json" 2> "$dir/err.txt"
grep -q "was not closed (its rank did not finish)" "$dir/err.txt"
"$python" -c "import json,sys; json.load(open(sys.argv[1]))" "$dir/some.json"
