"""What the multi-process tests here share: starting WORLD ranks of a test as separate processes
on this host, each with torchrun's variables (a free loopback port for the rendezvous), and
failing when any rank fails or outlives its time; and an environment of the test's own."""

import os
import socket
import subprocess
import sys
import traceback


def own_environment(**settings):
    """Makes this process's environment (and so its ranks') the test's own: every DISTCOMM_*
    setting it held is dropped, then `settings` are set. A test passes whatever DISTCOMM_* the
    environment it is run from holds (DISTCOMM_TIMEOUT=20, DISTCOMM_BACKEND=ucx, ...)."""
    for name in [n for n in os.environ if n.startswith("DISTCOMM_")]:
        del os.environ[name]
    os.environ.update(settings)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world, argv_of, port=None, timeout=240):
    """Runs `argv_of(rank)` (its command line) for every rank; 0 when every rank exits 0."""
    port = port or free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
        procs.append(subprocess.Popen([sys.executable] + argv_of(rank), env=env))
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append("timeout")
    print(f"ranks exited with {codes}")
    return 0 if all(c == 0 for c in codes) else 1


def rank_main(run):
    """A rank's exit status: run()'s, or 1 with the traceback printed."""
    try:
        return run()
    except Exception:
        traceback.print_exc()
        return 1


def checked(body, rank, world):
    """Runs body(rank, world, check), check(cond, what) noting each failed check: 1 when any
    failed (each printed), else 0. The first word of body's docstring names it."""
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    body(rank, world, check)
    for f in failures:
        print(f"rank {rank}: FAILED {f}", flush=True)
    if not failures:
        print(f"rank {rank}: all {body.__doc__.split(':')[0]} checks passed", flush=True)
    return 1 if failures else 0
