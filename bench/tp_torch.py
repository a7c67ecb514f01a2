#!/usr/bin/python3
"""PyTorch's gloo under distcomm-bench's --pattern tp: an in-place all_reduce of CPU tensors, each
after a fixed compute spinning on the rank's core, timed as a whole (bench/tp.sh runs it beside
distcomm-bench-shm --pattern tp --peer mpi).

  tp_torch.py <ranks> <compute_us> <iters> <dtype> <bytes>...

starts <ranks> processes on this host (loopback rendezvous on a free port) and prints, from
rank 0, one line per size: "torch_gloo <bytes> <us per call>" (the mean of the slowest rank).
"""
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = {"float": torch.float32, "bfloat16": torch.bfloat16}


def spin(us):
    until = time.perf_counter() + us * 1e-6
    while time.perf_counter() < until:
        pass


def rank_main(rank, ranks, port, compute_us, iters, dtype, sizes):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    t = DTYPES[dtype]
    for nbytes in sizes:
        buf = torch.zeros(nbytes // torch.tensor([], dtype=t).element_size(), dtype=t)
        for _ in range(max(10, iters // 10)):  # warm-up
            spin(compute_us)
            dist.all_reduce(buf)
        buf.fill_(float(rank + 1))
        dist.all_reduce(buf)
        expected = ranks * (ranks + 1) / 2
        if not bool(torch.all(buf == expected)):
            raise SystemExit(f"torch_gloo: wrong result at {nbytes} bytes")
        buf.zero_()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            spin(compute_us)
            dist.all_reduce(buf)
        us = torch.tensor([(time.perf_counter() - t0) / iters * 1e6], dtype=torch.float64)
        dist.all_reduce(us, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(f"torch_gloo {nbytes} {us.item():.2f}", flush=True)
    dist.destroy_process_group()


def main():
    if len(sys.argv) < 6:
        raise SystemExit(__doc__)
    ranks, compute_us, iters = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    dtype = sys.argv[4]
    if dtype not in DTYPES:
        raise SystemExit(f"tp_torch.py: dtype {dtype!r}: one of {', '.join(DTYPES)}")
    sizes = [int(s) for s in sys.argv[5:]]
    with socket.socket() as s:  # a free port; the rendezvous binds it at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(ranks, port, compute_us, iters, dtype, sizes), nprocs=ranks)


if __name__ == "__main__":
    main()
