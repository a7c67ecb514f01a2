#!/usr/bin/python3
"""A job's start-up through its store against the world size: DistComm's tcp_store
(build/bin/distcomm-test-store-scale) beside PyTorch's TCPStore (torch 1.13) doing the same
requests in the same run, each rank a thread of 4 processes on loopback: connect, set its key, a
barrier (its key, a count, the last arrival's done key), read its two ring neighbours' keys, a
second barrier. Sizes interleaved, --rounds times; prints the median seconds of each. DistComm's
time includes starting its rank processes (milliseconds); TCPStore's starts once its rank
processes have imported torch.

  bench/store_startup.py [--ranks 64 256 1024 4096 16384] [--rounds 3] [--procs 4]
"""
import argparse
import datetime
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "..", "build", "bin", "distcomm-test-store-scale")


def distcomm(ranks, procs, timeout):
    out = subprocess.run([PROBE, "--ranks", str(ranks), "--procs", str(procs), "--timeout",
                          str(timeout)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, timeout=timeout + 60)
    m = re.search(r": ([0-9.]+) s$", out.stdout.strip().splitlines()[0])
    return float(m.group(1)) if out.returncode == 0 and m else None


def torch_rank(port, rank, size, timeout, failures):
    import torch.distributed as dist
    try:
        kv = dist.TCPStore("127.0.0.1", port, size, False, datetime.timedelta(seconds=timeout))

        def barrier(name):
            kv.set(f"{name}/{rank}", "1")
            if kv.add(f"{name}/arrived", 1) == size:
                kv.set(f"{name}/done", "1")
            kv.wait([f"{name}/done"])

        kv.set(f"addr/{rank}", f"rank {rank}")
        barrier("published")
        for peer in ((rank + 1) % size, (rank + size - 1) % size):
            if kv.get(f"addr/{peer}") != f"rank {peer}".encode():
                raise RuntimeError(f"rank {rank}: wrong key for {peer}")
        barrier("connected")
    except Exception as e:  # noqa: BLE001 (counted and reported)
        failures.append(f"rank {rank}: {e}")


def torch_ranks(port, first, count, size, timeout):
    """A process of ranks (started by tcpstore(), by exec: a fork of a process whose server
    thread holds a lock could hang)."""
    import torch.distributed  # noqa: F401  (before the clock starts: see torch_server)
    print("ready", flush=True)
    sys.stdin.readline()
    failures = []
    threading.stack_size(256 * 1024)
    threads = [threading.Thread(target=torch_rank, args=(port, r, size, timeout, failures))
               for r in range(first, first + count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for f in failures[:3]:
        print(f, file=sys.stderr)
    return 1 if failures else 0


def torch_server(ranks, procs, timeout):
    """The TCPStore server and its rank processes; prints the seconds they took."""
    import torch.distributed as dist
    server = dist.TCPStore("127.0.0.1", 0, ranks, True, datetime.timedelta(seconds=timeout),
                           wait_for_workers=False)
    children = []
    for k in range(procs):
        first, last = ranks * k // procs, ranks * (k + 1) // procs
        children.append(subprocess.Popen(
            [sys.executable, __file__, "--tcpstore-ranks", str(server.port), str(first),
             str(last - first), str(ranks), "--timeout", str(timeout)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    # The clock starts once every process has imported torch (seconds of Python start-up that
    # are not the store's), as DistComm's probe starts its processes in milliseconds.
    for c in children:
        c.stdout.readline()
    start = time.monotonic()
    for c in children:
        c.stdin.write("go\n")
        c.stdin.flush()
    ok = all(c.wait() == 0 for c in children)
    print(f"seconds {time.monotonic() - start:.3f}" if ok else "failed", flush=True)
    os._exit(0)


def tcpstore(ranks, procs, timeout):
    # A session of its own: whatever is left of it when the server fails (its rank processes
    # retrying) is killed before the next measurement.
    server = subprocess.Popen([sys.executable, __file__, "--tcpstore-server", str(ranks),
                               "--procs", str(procs), "--timeout", str(timeout)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              start_new_session=True)
    try:
        out, _ = server.communicate(timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        out = ""
    try:
        os.killpg(server.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    server.wait()
    m = re.search(r"seconds ([0-9.]+)", out)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024, 4096, 16384])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--tcpstore-server", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--tcpstore-ranks", type=int, nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.tcpstore_server:
        return torch_server(a.tcpstore_server, a.procs, a.timeout)
    if a.tcpstore_ranks:
        return torch_ranks(*a.tcpstore_ranks, a.timeout)
    got = {(n, who): [] for n in a.ranks for who in ("distcomm", "tcpstore")}
    for r in range(a.rounds):
        for n in a.ranks:
            for who, run in (("distcomm", distcomm), ("tcpstore", tcpstore)):
                s = run(n, a.procs, a.timeout)
                got[(n, who)].append(s)
                print(f"round {r + 1} {n} ranks {who}: {s if s is None else f'{s:.2f} s'}",
                      flush=True)
    print("\n| ranks | DistComm tcp_store (s) | PyTorch TCPStore (s) | ratio |")
    print("|---:|---:|---:|---:|")
    for n in a.ranks:
        med = {}
        for who in ("distcomm", "tcpstore"):
            ok = [s for s in got[(n, who)] if s is not None]
            med[who] = statistics.median(ok) if len(ok) == len(got[(n, who)]) else None
        d, t = med["distcomm"], med["tcpstore"]
        fmt = lambda v: "failed" if v is None else f"{v:.2f}"  # noqa: E731
        ratio = f"{t / d:.2f}x" if d and t else "-"
        print(f"| {n} | {fmt(d)} | {fmt(t)} | {ratio} |")


if __name__ == "__main__":
    sys.exit(main())
