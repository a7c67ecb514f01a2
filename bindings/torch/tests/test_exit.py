#!/usr/bin/env python3
"""A program that ends with collectives still running on a "distcomm" group: every rank starts
all_reduces it never waits for, drops their tensors and works, and returns, so that Python ends
while the group's thread still runs them. Each rank must exit 0. (A thread of the group's that
lets a tensor go while Python finalizes needs the GIL, and Python ends such a thread with a forced
unwind: the process died of "terminate called without an active exception". The package waits for
every group's calls at exit, before Python finalizes: src/call_order.hpp.)
Each round starts WORLD fresh ranks; the race needs a few.

    test_exit.py [--world 2] [--rounds 5]
"""

import argparse
import sys

import ranks

CALLS = 8              # all_reduces left running at the end
ELEMENTS = 1 << 22     # 16 MiB of float32 each: long enough to be running when Python ends


def run_rank():
    import torch
    import torch.distributed as dist
    import distcomm_torch  # noqa: F401  (registers "distcomm")

    dist.init_process_group("distcomm")
    for _ in range(CALLS):
        dist.all_reduce(torch.ones(ELEMENTS), async_op=True)  # neither waited for nor kept
    return 0  # and Python ends, the calls still running


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rank", type=int)
    a = ap.parse_args()
    if a.rank is not None:
        return ranks.rank_main(run_rank)
    ranks.own_environment()
    failed = 0
    for r in range(a.rounds):
        code = ranks.launch(a.world, lambda rank: [__file__, "--rank", str(rank)], timeout=120)
        if code != 0:
            print(f"FAILED round {r + 1} of {a.rounds}: a rank did not exit 0", flush=True)
            failed += 1
    if not failed:
        print(f"every rank of {a.rounds} rounds exited 0, its calls still running as Python ended")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
