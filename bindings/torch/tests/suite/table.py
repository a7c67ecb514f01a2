#!/usr/bin/env python3
"""PyTorch's suite (run_distributed_test.py, forked ranks) with this interpreter's torch, for
gloo, distcomm and distcomm in place of gloo, at each world size, one run after the other; prints
one markdown row per run (torch, run, world, passed, skipped, failed, errors) as docs/TORCH.md
tabulates them, and exits 1 if a run had an unexplained failure.

    PYTHONPATH=<tree>/python PYTHON bindings/torch/tests/suite/table.py [--worlds 2 3]
"""

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = [("gloo", {"BACKEND": "gloo"}),
        ("distcomm", {"BACKEND": "distcomm"}),
        ("distcomm in place of gloo", {"BACKEND": "gloo", "IN_PLACE_OF_GLOO": "1"})]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 3])
    a = ap.parse_args()
    import torch
    rows, bad = [], 0
    for world in a.worlds:
        for name, env in RUNS:
            p = subprocess.run([sys.executable, os.path.join(HERE, "run_distributed_test.py"),
                                "--start", "fork"],
                               env=dict(os.environ, WORLD_SIZE=str(world), OMP_NUM_THREADS="1",
                                        **env),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=3600)
            m = re.search(r"suite: .*: (\d+) passed, (\d+) skipped, (\d+) failed, (\d+) errors",
                          p.stdout)
            counts = m.groups() if m else ("?",) * 4
            unexplained = re.findall(r"suite: unexplained failure: (\S+)", p.stdout)
            bad |= p.returncode != 0
            row = f"| {torch.__version__.split('+')[0]} | {name} | {world} | " + \
                " | ".join(counts) + " |" + (f" unexplained: {unexplained}" if unexplained else "")
            print(row, flush=True)
            rows.append(row)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
