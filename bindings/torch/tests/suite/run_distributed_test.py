#!/usr/bin/env python3
"""PyTorch's own distributed test suite (torch/testing/_internal/distributed/distributed_test.py,
from Debian's python3-torch) against a backend, the way PyTorch's test_distributed_spawn.py runs
it: each test spawns WORLD_SIZE processes that join a process group of BACKEND through a file
store. For "distcomm" the suite's plugin hook is set (DistTestCases.backend_feature["plugin"]),
and "distcomm" joins the features it has as gloo does: "ddp" (DDP on CPU). GPU features it does not
claim.

    BACKEND=distcomm WORLD_SIZE=2 run_distributed_test.py [unittest arguments, e.g. -k allreduce]

    ... --start fork        # children forked from this process instead of spawned (faster)
    ... --json FILE         # every test's outcome, for comparing backends

    BACKEND=gloo IN_PLACE_OF_GLOO=1 run_distributed_test.py ...
                            # "distcomm" as a drop-in for gloo: the suite runs its gloo tests
                            # (those it reserves for gloo by name too), and every group it makes,
                            # gloo's included, is made with "distcomm"

Prints unittest's summary and one line "suite: N passed, N skipped, N failed, N errors". Exits 0
when every failure or error is torch's own (KNOWN), 1 otherwise, naming the others.
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the expecttest stand-in

# What fails inside torch 1.13 itself on Python 3.11, with any backend (gloo too): importing
# torch.distributed._shard, which DDP's tests reach, raises this ValueError.
KNOWN = "mutable default <class 'torch.distributed._shard"
# In place of gloo, what fails because the backend is not named gloo, not for what it does: the
# suite asserts get_backend() == "gloo", and PyTorch's monitored_barrier refuses any backend
# not named gloo (its text, below: at world 3 more of the suite's monitored_barrier tests run).
NAMED_GLOO = {"test_get_backend", "test_monitored_barrier_gloo",
              "test_monitored_barrier_gloo_rank_0_timeout", "test_monitored_barrier_gloo_subgroup"}
GLOO_ONLY = "monitored_barrier is only implemented for GLOO backend"
# On torch 2.x, what fails for any backend a third party registers, not for what it does: DDP's
# logging data names the group's backend by ProcessGroup::getBackendName(), which is "custom" for
# every backend not built into torch, and test_ddp_logging_data_cpu compares that with
# get_backend()'s "distcomm". Matched by the assertion's own text.
CUSTOM_NAME = "'custom' != 'distcomm'"

# At import, not in main(): each spawned rank imports this file again to find the test class.
# No DISTCOMM_* setting of the caller's environment reaches the suite.
sys.path.insert(0, os.path.dirname(HERE))
import ranks  # noqa: E402

ranks.own_environment()
BACKEND = os.environ.setdefault("BACKEND", "distcomm")
os.environ.setdefault("WORLD_SIZE", "2")
IN_PLACE_OF_GLOO = BACKEND == "gloo" and os.environ.get("IN_PLACE_OF_GLOO") == "1"
if BACKEND == "distcomm" or IN_PLACE_OF_GLOO:
    import distcomm_torch  # noqa: F401,E402  (registers the backend)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if IN_PLACE_OF_GLOO:
    def _distcomm_for_gloo(backend):
        return "distcomm" if backend is None or str(backend).lower() == "gloo" else backend

    def _patched(fn):
        def made_with_distcomm(*args, **kwargs):
            if "backend" in kwargs:
                kwargs["backend"] = _distcomm_for_gloo(kwargs["backend"])
            elif fn.__name__ == "init_process_group" and args:
                args = (_distcomm_for_gloo(args[0]),) + tuple(args[1:])
            elif fn.__name__ == "init_process_group":
                kwargs["backend"] = "distcomm"
            return fn(*args, **kwargs)
        return made_with_distcomm

    # The suite calls them through torch.distributed; new_group's backend is its third argument
    # where given by position (ranks, timeout, backend), which the suite never does.
    dist.init_process_group = _patched(dist.init_process_group)
    dist.new_group = _patched(dist.new_group)
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

# The suite's feature sets a plugin joins, as gloo is in them: "ddp" (DDP), "subgroup"
# (new_group, model averagers) and "gpu" (object collectives, hooks). A test of these that needs
# CUDA skips itself here, as it does for gloo.
FEATURES = ("plugin", "ddp", "subgroup", "gpu")
if BACKEND not in ("gloo", "nccl", "mpi", "ucc"):
    DistTestCases.backend_feature["plugin"].add(BACKEND)
    for feature in FEATURES:
        DistTestCases.backend_feature[feature].add(BACKEND)

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    start_method = "spawn"  # PyTorch's own; --start fork reuses this process's imports

    def setUp(self):
        super().setUp()
        self._start_processes(torch.multiprocessing.get_context(self.start_method).Process)


class Recording(unittest.TextTestResult):
    """unittest's verbose result, also keeping the tests that passed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passed = []

    def addSuccess(self, test):  # noqa: N802 (unittest's name)
        super().addSuccess(test)
        self.passed.append(test)


def main():
    argv = list(sys.argv)
    json_out = None
    for flag in ("--start", "--json"):
        if flag in argv:
            i = argv.index(flag)
            if flag == "--start":
                TestDistBackendWithSpawn.start_method = argv[i + 1]
            else:
                json_out = argv[i + 1]
            del argv[i:i + 2]
    runner = unittest.TextTestRunner(resultclass=Recording, verbosity=2)
    r = unittest.main(module=__name__, argv=argv, exit=False, testRunner=runner).result
    name = lambda t: t.id().split(".")[-1]  # noqa: E731
    bad = r.failures + r.errors
    known = [t for t, text in bad if KNOWN in text]
    named = [t for t, text in bad
             if (IN_PLACE_OF_GLOO and (name(t) in NAMED_GLOO or GLOO_ONLY in text)) or
             CUSTOM_NAME in text]
    unexplained = [t for t, text in bad if KNOWN not in text and t not in named]
    shown = "distcomm in place of gloo" if IN_PLACE_OF_GLOO else BACKEND
    print(f"suite: {shown} world {os.environ['WORLD_SIZE']} "
          f"({TestDistBackendWithSpawn.start_method}): {len(r.passed)} passed, "
          f"{len(r.skipped)} skipped, {len(r.failures)} failed, {len(r.errors)} errors "
          f"({len(known)} of them torch's own _shard import"
          f", {len(named)} asserting a name)", flush=True)
    for t in unexplained:
        print(f"suite: unexplained failure: {t.id()}", flush=True)
    if json_out:
        import json
        with open(json_out, "w") as f:
            json.dump({"passed": sorted(name(t) for t in r.passed),
                       "skipped": {name(t): why for t, why in r.skipped},
                       "failed": sorted(name(t) for t, _ in r.failures),
                       "errors": sorted(name(t) for t, _ in r.errors)}, f, indent=1)
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
