#!/bin/sh
# bench smoke test: runs the command (a benchmark, possibly under a launcher), shows its output,
# and passes only when it exits 0 AND its correctness check found no wrong element.
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
"$@" >"$out" 2>&1
rc=$?
cat "$out"
if [ "$rc" -ne 0 ]; then
  echo "smoke: exit code $rc" >&2
  exit 1
fi
if ! grep -q '^# Out of bounds values : 0 OK$' "$out"; then
  echo "smoke: no '# Out of bounds values : 0 OK' line" >&2
  exit 1
fi
