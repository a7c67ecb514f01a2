#!/usr/bin/env python3
"""DDP training throughput: backend "distcomm" (over each DistComm transport named) against
"gloo", in the same run, interleaved, at 1, 2 and 4 processes, one torch thread per process,
on the example CNN and the 29 M-parameter MLP. Prints the median samples/s of --rounds runs and
the scaling efficiency (samples/s at N over N x samples/s at 1, same per-process batch).

    PYTHONPATH=build/python /usr/bin/python3 examples/torch_ddp/bench.py \
        [--procs 1 2 4] [--models cnn mlp] [--transports shm gloo ucx] [--rounds 3] [--steps 20]
        [--fsdp2] [--floor]

--floor adds the same DDP runs with a communication hook that exchanges nothing (train.py
--no-communication): what running N processes side by side costs a step by itself (shared cores,
caches and memory bandwidth), the part of "added to the step" no backend can remove.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

import torchrun

FLOOR = "no communication"  # the transport slot of the --floor runs
TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")


def throughput(np, model, backend, transport, steps, batch, fsdp2=False):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    flags = ["--fsdp2"] if fsdp2 else []
    if transport == FLOOR:
        flags.append("--no-communication")
    elif transport:
        env["DISTCOMM_BACKEND"] = transport
    cmd = torchrun.command(np, TRAIN, ["--backend", backend, "--model", model, "--steps",
                                       str(steps), "--batch", str(batch), "--threads", "1"] +
                           flags)
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=900)
    m = re.search(r"throughput ([0-9.]+) samples/s", p.stdout)
    if p.returncode != 0 or not m:
        print(p.stdout[-3000:], file=sys.stderr)
        raise SystemExit(f"bench: {backend}/{transport} at {np} processes failed")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--models", nargs="+", default=["cnn", "mlp"])
    ap.add_argument("--transports", nargs="+", default=["shm", "gloo", "ucx"],
                    help="DISTCOMM_BACKEND values to run backend distcomm over")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--fsdp2", action="store_true", help="FSDP2 in place of DDP (train.py)")
    ap.add_argument("--floor", action="store_true",
                    help="also DDP exchanging nothing (see above; not with --fsdp2)")
    a = ap.parse_args()
    if a.floor and a.fsdp2:
        ap.error("--floor measures DDP: FSDP2 has no communication hook to leave out")
    configs = [("gloo", None)] + [("distcomm", t) for t in a.transports]
    if a.floor:
        configs.append(("gloo", FLOOR))
    results = {}
    for rnd in range(a.rounds):
        for model in a.models:
            for np in a.procs:
                for backend, transport in configs:
                    v = throughput(np, model, backend, transport, a.steps, a.batch, a.fsdp2)
                    results.setdefault((model, np, backend, transport), []).append(v)
                    print(f"round {rnd} {model} np{np} {backend}/{transport or '-'}: {v:.1f}",
                          flush=True)
    # The time the data-parallel wrapper adds to a process's step: the step at N processes less
    # the step of one process alone, the median over every backend's one-process runs (the same
    # computation, none communicating).
    print("\n| model | processes | backend | samples/s (median) | efficiency | step (ms) "
          "| added to the step (ms) |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for model in a.models:
        alone = None
        if 1 in a.procs:
            alone = a.batch / statistics.median(
                v for backend, transport in configs for v in results[(model, 1, backend, transport)])
        for backend, transport in configs:
            base = statistics.median(results[(model, min(a.procs), backend, transport)])
            for np in a.procs:
                v = statistics.median(results[(model, np, backend, transport)])
                eff = v / (np / min(a.procs) * base)
                step = np * a.batch / v
                added = f"{1000 * (step - alone):.1f}" if alone is not None and np > 1 else "-"
                name = (FLOOR if transport == FLOOR else
                        backend + (f" over {transport}" if transport else " (torch)"))
                print(f"| {model} | {np} | {name} | {v:.1f} | {100 * eff:.0f}% | "
                      f"{1000 * step:.1f} | {added} |")


if __name__ == "__main__":
    main()
