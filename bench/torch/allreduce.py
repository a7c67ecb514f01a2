#!/usr/bin/env python3
"""torch.distributed.all_reduce through torch, "distcomm" against PyTorch's "gloo": 2 processes
on this host (loopback rendezvous on a free port), one torch thread each, an in-place f32 sum of
every size from 8 B to 64 MiB. The backends' jobs are interleaved, ROUNDS rounds; each size's
figure is a round's mean time per call (the slowest rank's), the table their medians.

    PYTHON bench/torch/allreduce.py [--rounds 3] [--world 2] [--backends distcomm gloo]

PYTHON is the interpreter of the torch to measure (scripts/torch.sh prints one) with
distcomm_torch importable (PYTHONPATH=build-torch-<version>/python). Prints one line per size:
bytes, each backend's microseconds per call, and distcomm's speed over gloo's.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

SIZES = [8 << (3 * i) for i in range(8)] + [64 << 20]  # 8 B, 64 B, ... 16 MiB, 64 MiB
BUDGET_S = 0.4  # timed seconds per size and job, at least 5 calls


def rank_main(backend, sizes):
    import torch
    import torch.distributed as dist
    import distcomm_torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group(backend)
    world = dist.get_world_size()
    for nbytes in sizes:
        buf = torch.full((max(1, nbytes // 4),), float(dist.get_rank() + 1))
        dist.all_reduce(buf)
        if not bool(torch.all(buf == world * (world + 1) / 2)):
            raise SystemExit(f"{backend}: wrong sum at {nbytes} bytes")
        # As many calls as fit the budget, agreed by every rank (rank 0's estimate).
        t0 = time.perf_counter()
        for _ in range(3):
            dist.all_reduce(buf)
        per = (time.perf_counter() - t0) / 3
        n = torch.tensor([max(5, int(BUDGET_S / max(per, 1e-7)))])
        dist.broadcast(n, 0)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(int(n)):
            dist.all_reduce(buf)
        us = torch.tensor([(time.perf_counter() - t0) / int(n) * 1e6], dtype=torch.float64)
        dist.all_reduce(us, op=dist.ReduceOp.MAX)
        if dist.get_rank() == 0:
            print(f"{nbytes} {us.item():.3f}", flush=True)
    dist.destroy_process_group()


def job(backend, world, sizes):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--rank-of", backend, "--sizes"] + [str(b) for b in sizes],
            env=env, stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL, text=True))
    out, _ = procs[0].communicate(timeout=1800)
    for p in procs[1:]:
        p.wait(timeout=600)
    if any(p.returncode for p in procs):
        raise SystemExit(f"the {backend} job failed: {[p.returncode for p in procs]}")
    return {int(b): float(us) for b, us in (line.split() for line in out.splitlines())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--backends", nargs="+", default=["distcomm", "gloo"])
    ap.add_argument("--sizes", nargs="+", type=int, default=SIZES)
    ap.add_argument("--rank-of", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank_of:
        return rank_main(a.rank_of, a.sizes)
    import torch
    runs = {b: [] for b in a.backends}
    for r in range(a.rounds):
        for b in a.backends:
            runs[b].append(job(b, a.world, a.sizes))
            print(f"round {r + 1}: {b} done", file=sys.stderr, flush=True)
    print(f"# torch {torch.__version__}, {a.world} processes, medians of {a.rounds} rounds "
          f"(µs per all_reduce); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("bytes " + " ".join(f"{b}_us" for b in a.backends) +
          (" distcomm/gloo_speed" if {"distcomm", "gloo"} <= set(a.backends) else ""))
    for nbytes in a.sizes:
        med = {b: statistics.median(run[nbytes] for run in runs[b]) for b in a.backends}
        line = f"{nbytes} " + " ".join(f"{med[b]:.1f}" for b in a.backends)
        if "distcomm" in med and "gloo" in med:
            line += f" {med['gloo'] / med['distcomm']:.1f}x"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
