#!/usr/bin/env python3
"""No public header is over the limit: a header that grows past it splits along its seams.

usage: header_sizes.py SOURCE_DIR [LIMIT]

Every .hpp and .h under an include/ folder of the source tree (include/, init/include/,
backends/*/include/, plugins/include/, cuda/include/, ...), build trees aside, has at most
LIMIT lines (default 400). Exits 1 naming each header over it with its length.
"""
import pathlib
import sys


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1]).resolve()
    limit = int(sys.argv[2]) if len(sys.argv) == 3 else 400
    checked, over = 0, []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.suffix not in (".hpp", ".h") or "include" not in rel.parts[:-1]:
            continue
        if rel.parts[0].startswith("build") or rel.parts[0] == ".git":
            continue
        checked += 1
        lines = len(path.read_text(encoding="utf-8", errors="replace").splitlines())
        if lines > limit:
            over.append(f"{rel}: {lines} lines (at most {limit}: split it along its seams)")
    if checked == 0:
        print(f"no headers found under {root}: wrong SOURCE_DIR?", file=sys.stderr)
        return 1
    for o in over:
        print(o)
    print(f"{checked} headers checked, {len(over)} over {limit} lines")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
