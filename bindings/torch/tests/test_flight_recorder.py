#!/usr/bin/env python3
"""A hung torch job over "distcomm", read by PyTorch's own flight-recorder analyzer
(python -m torch.distributed.flight_recorder.fr_trace): WORLD ranks run all_reduces on a group,
the last rank skips the last one and waits elsewhere. The others time out in it, and DistComm
dumps their flight recorders into DISTCOMM_DUMP_DIR; the test then sends the last rank SIGUSR1,
which dumps its own. Every dump is written twice: DistComm's JSON (distcomm-trace's) and torch's
pickled form (distcomm_torch_fr_<rank>). The analyzer must name the collective and the rank that
did not join it. Skipped (77, saying why) where the torch has no analyzer or no flight recorder.

    test_flight_recorder.py [--world 3]
"""

import argparse
import datetime
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time

import ranks

SKIP = 77
STEPS = 4          # all_reduces on the group; the last rank skips the last one
GROUP_TIMEOUT = 10  # seconds: what the waiting ranks wait in the skipped all_reduce


def run_rank(rank, world):
    import torch
    import torch.distributed as dist
    import distcomm_torch  # noqa: F401  (registers "distcomm")

    dist.init_process_group("distcomm", timeout=datetime.timedelta(seconds=300))
    dist.barrier()  # the ranks meet here, however long each took to start
    group = dist.new_group(list(range(world)), timeout=datetime.timedelta(seconds=GROUP_TIMEOUT))
    t = torch.ones(8)
    for step in range(STEPS):
        if rank == world - 1 and step == STEPS - 1:
            print(f"rank {rank}: skipping all_reduce {step + 1} and waiting", flush=True)
            while True:  # hung outside the collectives until the test ends it
                time.sleep(1)
        try:
            dist.all_reduce(t, group=group)
        except RuntimeError as e:
            print(f"rank {rank}: all_reduce {step + 1} failed as it should: {e}", flush=True)
            return 0
    print(f"rank {rank}: every all_reduce completed, but rank {world - 1} skipped one",
          flush=True)
    return 1


def wait_for(pred, seconds):
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if pred():
            return True
        time.sleep(0.2)
    return pred()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=3)
    ap.add_argument("--rank", type=int)
    a = ap.parse_args()
    if a.rank is not None:
        return ranks.rank_main(lambda: run_rank(a.rank, a.world))

    import torch
    import distcomm_torch
    try:
        import torch.distributed.flight_recorder.fr_trace  # noqa: F401
    except ImportError:
        print(f"skipped: torch {torch.__version__} ships no flight-recorder analyzer "
              "(torch.distributed.flight_recorder)")
        return SKIP
    prefix = distcomm_torch._C.TORCH_FLIGHT_RECORDER_PREFIX  # "distcomm:"; "nccl:" before 2.15
    if not prefix:
        print(f"skipped: torch {torch.__version__} has no flight recorder of its own")
        return SKIP

    world, last = a.world, a.world - 1
    with tempfile.TemporaryDirectory(prefix="distcomm-fr-") as dumps:
        ranks.own_environment(DISTCOMM_DUMP_DIR=dumps)
        port = ranks.free_port()
        procs = []
        for rank in range(world):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
            procs.append(subprocess.Popen([sys.executable, __file__, "--rank", str(rank),
                                           "--world", str(world)], env=env))
        failures = []
        try:
            # The others time out in the all_reduce the last rank skipped, and dump as they fail.
            for rank, p in enumerate(procs[:last]):
                try:
                    if p.wait(timeout=300) != 0:
                        failures.append(f"rank {rank} exited with {p.returncode}")
                except subprocess.TimeoutExpired:
                    failures.append(f"rank {rank} did not fail its all_reduce within 300 s")
            mine = os.path.join(dumps, f"distcomm_torch_fr_{last}")
            if procs[last].poll() is None:
                procs[last].send_signal(signal.SIGUSR1)  # as one reads a hung rank
            if not wait_for(lambda: os.path.exists(mine), 60):
                failures.append(f"rank {last} wrote no dump on SIGUSR1 within 60 s")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        ours = sorted(os.path.basename(f) for f in glob.glob(os.path.join(dumps, "distcomm-*")))
        theirs = sorted(os.path.basename(f) for f in glob.glob(os.path.join(dumps, "distcomm_torch_fr_*")))
        print(f"dumps: {ours + theirs}", flush=True)
        if len(ours) != world:
            failures.append(f"{len(ours)} DistComm dumps (distcomm-flight.*.json), not {world}")
        if theirs != [f"distcomm_torch_fr_{r}" for r in range(world)]:
            failures.append(f"torch-format dumps {theirs}, not one per rank")
        analyzer = subprocess.run(
            [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", dumps],
            capture_output=True, text=True, timeout=300)
        report = analyzer.stdout + analyzer.stderr
        print("torch's analyzer says:\n" + report, flush=True)
        expected = ["Not all ranks joining collective", f"sequence number: {STEPS}",
                    f"collective: {prefix}all_reduce", f"missing ranks: {{{last}}}"]
        for words in expected:
            if words not in report:
                failures.append(f"the analyzer's report does not say '{words}'")
    for f in failures:
        print(f"FAILED {f}", flush=True)
    if not failures:
        print(f"torch's analyzer names rank {last}, which skipped all_reduce {STEPS}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
