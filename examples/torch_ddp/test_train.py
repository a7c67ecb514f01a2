#!/usr/bin/env python3
"""The DDP example as the tests run it (ctest label "torch"):
  * backend distcomm and backend gloo train the same model from the same start under torchrun:
    the loss falls, and the final parameters agree within float tolerance;
  * under DISTCOMM_DETERMINISTIC=1 with --shard-size, 1, 2 and 4 processes at the same global
    batch end with bitwise-equal parameters;
  * DDP's fp16 compression hook runs over distcomm under Join, with uneven inputs;
  * distcomm-run starts it as well as torchrun does.

    test_train.py [--distcomm-run build/bin/distcomm-run] [--quick]
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile

import torchrun

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "train.py")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


# A collective that never completes fails within this (the group's timeout), naming the cause;
# the run as a whole is given a little more.
GROUP_TIMEOUT_S = 120
RUN_TIMEOUT_S = GROUP_TIMEOUT_S + 60


def run(np, args, env=None, launcher=None):
    e = dict(os.environ)
    e.update(env or {})
    args = args + ["--timeout", str(GROUP_TIMEOUT_S)]
    if launcher:
        cmd = [launcher, "-np", str(np), sys.executable, TRAIN] + args
    else:
        cmd = torchrun.command(np, TRAIN, args)
    p = subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the launcher and every process it started
        out, _ = p.communicate()
        print(f"{' '.join(cmd)}: still running after {RUN_TIMEOUT_S} s, killed; its output:")
        print(out[-8000:])
        return -1, [], out
    if p.returncode != 0:
        print(out[-4000:])
    losses = [float(x) for x in re.findall(r"loss ([0-9.]+)", out)]
    return p.returncode, losses, out


def params(path):
    import torch
    return torch.load(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--distcomm-run")
    ap.add_argument("--quick", action="store_true", help="fewer steps; the fp16 run is the one distcomm-run starts")
    a = ap.parse_args()
    import torch
    tmp = tempfile.mkdtemp(prefix="torch_ddp-test-")
    steps = "8" if a.quick else "20"

    # distcomm against gloo, same start, same data.
    saved = {}
    for backend in ("distcomm", "gloo"):
        path = os.path.join(tmp, backend + ".pt")
        rc, losses, _ = run(2, ["--backend", backend, "--steps", steps, "--save", path])
        check(rc == 0, f"{backend}: 2 processes under torchrun exit 0")
        check(len(losses) >= 2 and losses[-1] < losses[0], f"{backend}: the loss falls {losses}")
        if rc == 0:
            saved[backend] = params(path)
    if len(saved) == 2:
        diff = (saved["distcomm"] - saved["gloo"]).abs().max().item()
        check(torch.allclose(saved["distcomm"], saved["gloo"], rtol=1e-4, atol=1e-5),
              f"distcomm and gloo parameters agree (max difference {diff:.3g})")

    # Bitwise across 1, 2 and 4 processes at one global batch.
    det = {}
    for np in (1, 2, 4):
        path = os.path.join(tmp, f"det{np}.pt")
        rc, losses, _ = run(np, ["--backend", "distcomm", "--steps", "4", "--global-batch", "64",
                                 "--shard-size", "16", "--save", path],
                            env={"DISTCOMM_DETERMINISTIC": "1"})
        check(rc == 0, f"deterministic, {np} processes: exit 0")
        if rc == 0:
            det[np] = params(path)
    if len(det) == 3:
        check(torch.equal(det[1], det[2]), "deterministic: 1 and 2 processes bitwise equal")
        check(torch.equal(det[1], det[4]), "deterministic: 1 and 4 processes bitwise equal")

    # DDP's fp16 compression hook, under Join with uneven inputs (rank 1 runs one step more);
    # --quick starts it with distcomm-run, when given, instead of a run of its own.
    quick_launcher = a.distcomm_run if a.quick else None
    rc, losses, _ = run(2, ["--backend", "distcomm", "--steps", steps, "--fp16-hook", "--uneven"],
                        launcher=quick_launcher)
    check(rc == 0 and losses and losses[-1] < losses[0],
          f"fp16 compression hook under Join, uneven inputs {losses}"
          + (", started by distcomm-run" if quick_launcher else ""))

    if a.distcomm_run and not quick_launcher:
        rc, losses, _ = run(2, ["--backend", "distcomm", "--steps", "4"], launcher=a.distcomm_run)
        check(rc == 0 and len(losses) >= 1, "started by distcomm-run")

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
