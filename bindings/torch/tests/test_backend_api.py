#!/usr/bin/env python3
"""What torch 2.x asks of a backend beyond the collectives, over "distcomm", rank by rank:
"cpu:distcomm" backend strings and eager init with device_id, the capability queries, the
single-tensor collectives under torch 2.14's names, split_group and new_subgroups, get_error,
the options torch reads back, shutdown() and abort() refusing what follows, shrink_group onto
DistComm's shrink; and "distcomm" left alone by torch when TORCH_DISTRIBUTED_USE_TORCHCOMMS=1 and
under TORCH_DISTRIBUTED_DEBUG=DETAIL. On torch 1.13 it prints why and skips.

    test_backend_api.py [--world 2] [--mode api|torchcomms|detail]

  api         the calls above
  torchcomms  TORCH_DISTRIBUTED_USE_TORCHCOMMS=1, with a stand-in torchcomms package that owns
              gloo and nccl (the real one is not on PyPI): torch must not route "distcomm" to it
  detail      TORCH_DISTRIBUTED_DEBUG=DETAIL: torch wraps the group in its checking wrapper
"""

import argparse
import datetime
import os
import sys
import tempfile
import textwrap
import time

import ranks

SKIP = 77


def torch_2():
    import torch
    return int(torch.__version__.split(".")[0]) >= 2


def fake_torchcomms(where):
    """A stand-in torchcomms package in `where`: it owns gloo and nccl, and fails loudly if torch
    hands it another backend."""
    pkg = os.path.join(where, "torchcomms")
    os.makedirs(os.path.join(pkg, "_comms"), exist_ok=True)
    owned = '("gloo", "nccl", "ncclx", "rccl", "xccl")'
    with open(os.path.join(pkg, "__init__.py"), "w") as f:
        f.write(textwrap.dedent(f"""\
            OWNED = {owned}

            def is_backend_built(name):
                return name in OWNED

            def new_comm(backend, *args, **kwargs):
                raise AssertionError(f"torch routed backend {{backend!r}} to torchcomms")
            """))
    with open(os.path.join(pkg, "_comms", "__init__.py"), "w") as f:
        f.write(textwrap.dedent("""\
            from torchcomms import new_comm, OWNED

            class _BackendWrapper:
                pass

            def _is_backend_registered(name):
                return name in OWNED
            """))
    with open(os.path.join(pkg, "hooks.py"), "w") as f:
        f.write("class FlightRecorderHook:\n    pass\n")


def launch(world, mode):
    settings = {}
    extra = {}
    if mode == "torchcomms":
        tmp = tempfile.mkdtemp(prefix="distcomm-torchcomms-")
        fake_torchcomms(tmp)
        extra["TORCH_DISTRIBUTED_USE_TORCHCOMMS"] = "1"
        extra["PYTHONPATH"] = tmp + os.pathsep + os.environ.get("PYTHONPATH", "")
    elif mode == "detail":
        extra["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    ranks.own_environment(**settings)
    os.environ.update(extra)
    return ranks.launch(world, lambda rank: [__file__, "--rank", str(rank), "--world", str(world),
                                            "--mode", mode])


def run_api(rank, world, check):
    """api: what torch 2.x asks of the backend"""
    import torch
    import torch.distributed as dist

    p, r = world, rank
    cpu = torch.device("cpu")
    # "cpu:distcomm" (a backend per device type) and eager init with device_id
    try:
        dist.init_process_group("cpu:distcomm", rank=r, world_size=p,
                                device_id=torch.device("cpu", 0))
    except ValueError as e:  # torch before 2.14 binds accelerators only
        if "accelerator" not in str(e):
            raise
        print(f"rank {r}: torch {torch.__version__} takes no CPU device_id ({e})", flush=True)
        dist.init_process_group("cpu:distcomm", rank=r, world_size=p)
    pg = dist.distributed_c10d._get_default_group()
    be = pg._get_backend(cpu)
    check(be.name() == "distcomm", f"the default group's cpu backend is {be.name()}")
    check(dist.get_backend() in ("cpu:distcomm", "distcomm"), f"get_backend {dist.get_backend()}")

    # capability queries
    check(be.supports_splitting, "supports_splitting")
    check(not be.supports_coalescing, "supports_coalescing (startCoalescing is not implemented)")
    if hasattr(be, "supports_shrinking"):
        check(be.supports_shrinking, "supports_shrinking")
    if hasattr(be, "options"):
        check(be.options.backend == "distcomm", f"options.backend {be.options.backend}")
    # torch 2.14 and later show get_error and options to Python; the C++ members are built alike
    errors = hasattr(be, "get_error")
    if errors:
        check(str(be.get_error()).endswith("SUCCESS"), f"get_error before any failure: "
              f"{be.get_error()}")

    # the single-tensor collectives (all_gather_single ... in torch 2.14 and later)
    whole = torch.empty(3 * p)
    dist.all_gather_into_tensor(whole, torch.full((3,), float(r)))
    check(torch.equal(whole, torch.arange(p).repeat_interleave(3).float()),
          f"all_gather_into_tensor {whole}")
    part = torch.empty(2)
    dist.reduce_scatter_tensor(part, torch.arange(2 * p).float())
    check(torch.equal(part, torch.tensor([2.0 * r, 2.0 * r + 1]) * p),
          f"reduce_scatter_tensor {part}")
    out = torch.empty(p)
    dist.all_to_all_single(out, torch.full((p,), float(r)))
    check(torch.equal(out, torch.arange(p).float()), f"all_to_all_single {out}")
    if hasattr(dist, "gather_single") or hasattr(pg, "gather_single"):
        pass  # no public Python entry in every version; the C++ name is covered by the build
    with dist._coalescing_manager(async_ops=True) as cm:
        outs = [torch.empty(2 * p) for _ in range(2)]
        for k, o in enumerate(outs):
            dist.all_gather_into_tensor(o, torch.full((2,), float(r + k)))
    cm.wait()
    check(all(torch.equal(o, (torch.arange(p).repeat_interleave(2) + k).float())
              for k, o in enumerate(outs)), f"coalesced all_gather_into_tensor {outs}")

    # split_group: the parent's ranks in two (or one) groups of their own
    # (torch before 2.14 splits only a group bound to a device, and binds accelerators only)
    if pg.bound_device_id is not None or hasattr(dist.Backend, "_ensure_backend_registered"):
        halves = [list(range(0, (p + 1) // 2)), list(range((p + 1) // 2, p))]
        halves = [h for h in halves if h]
        g = dist.split_group(split_ranks=halves)
        mine = next(h for h in halves if r in h)
        t = torch.ones(4)
        dist.all_reduce(t, group=g)
        check(torch.equal(t, torch.full((4,), float(len(mine)))), f"split_group all_reduce {t}")
        check(g._get_backend(cpu).name() == "distcomm", "split_group's backend")
    else:
        print(f"rank {r}: torch {torch.__version__} splits no group without a device bound "
              f"(split_group skipped)", flush=True)

    # new_subgroups: groups of one rank each
    sub, subs = dist.new_subgroups(group_size=1)
    t = torch.full((2,), float(r))
    dist.all_reduce(t, group=sub)
    check(torch.equal(t, torch.full((2,), float(r))), f"new_subgroups all_reduce {t}")
    check(len(subs) == p, f"new_subgroups made {len(subs)} groups")

    # a failed collective: get_error says how
    short = dist.new_group(list(range(p)), timeout=datetime.timedelta(seconds=2))
    if r == 0:
        try:
            dist.barrier(group=short)
            check(False, "a barrier rank 0 entered alone completed")
        except RuntimeError:
            if errors:
                err = str(short._get_backend(cpu).get_error())
                check(err.endswith("TIMEOUT"), f"get_error after a timeout: {err}")
    dist.barrier()

    # shutdown() and abort(): what follows is refused, naming which
    for how in ("shutdown", "abort"):
        h = dist.new_group(list(range(p)))
        dist.all_reduce(torch.ones(1), group=h)
        getattr(h._get_backend(cpu), how)()
        try:
            dist.all_reduce(torch.ones(1), group=h)
            check(False, f"a collective after {how}() ran")
        except RuntimeError as e:
            check(f"closed by {how}()" in str(e), f"after {how}(): {e!s:.300}")
    dist.barrier()

    # shrink_group: the last rank leaves; the others go on as a group of p - 1, the default one
    if p >= 2 and hasattr(dist, "shrink_group"):
        if r == p - 1:
            dist.destroy_process_group()
            return
        began = time.monotonic()
        new = dist.shrink_group([p - 1])
        took = time.monotonic() - began
        t = torch.ones(3)
        dist.all_reduce(t, group=new)
        check(new.size() == p - 1 and torch.equal(t, torch.full((3,), float(p - 1))),
              f"after shrink_group: size {new.size()}, all_reduce {t}")
        check(dist.get_world_size() == p - 1, f"the default group after shrinking has "
              f"{dist.get_world_size()} ranks")
        print(f"rank {r}: shrink_group took {took:.1f} s", flush=True)
    dist.destroy_process_group()


def run_torchcomms(rank, world, check):
    """torchcomms: "distcomm" with TORCH_DISTRIBUTED_USE_TORCHCOMMS=1"""
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    available = getattr(c10d, "_TORCHCOMM_AVAILABLE", False)
    print(f"rank {rank}: torchcomms stand-in seen by torch: {available}", flush=True)
    if available and not hasattr(c10d, "_torchcomms_handles_backend"):
        # torch 2.11-2.13 route every backend but "fake" to torchcomms when it is enabled
        print(f"rank {rank}: skipped: torch {torch.__version__} routes every backend to "
              f"torchcomms when TORCH_DISTRIBUTED_USE_TORCHCOMMS=1 (docs/TORCH.md)", flush=True)
        return
    dist.init_process_group("distcomm", rank=rank, world_size=world)
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((5,), float(sum(range(1, world + 1))))), f"all_reduce {t}")
    be = c10d._get_default_group()._get_backend(torch.device("cpu"))
    check(be.name() == "distcomm", f"the group's backend is {be.name()}, not distcomm's")
    g = dist.new_group(list(range(world)))
    dist.barrier(group=g)
    dist.destroy_process_group()


def run_detail(rank, world, check):
    """detail: "distcomm" under TORCH_DISTRIBUTED_DEBUG=DETAIL"""
    import torch
    import torch.distributed as dist

    dist.init_process_group("distcomm", rank=rank, world_size=world)
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((5,), float(sum(range(1, world + 1))))), f"all_reduce {t}")
    outs = [torch.empty(3) for _ in range(world)]
    dist.all_gather(outs, torch.full((3,), float(rank)))
    check(all(torch.equal(o, torch.full((3,), float(q))) for q, o in enumerate(outs)),
          f"all_gather {outs}")
    b = torch.full((2,), float(rank))
    dist.broadcast(b, src=world - 1)
    check(torch.equal(b, torch.full((2,), float(world - 1))), f"broadcast {b}")
    g = dist.new_group(list(range(world)))
    dist.barrier(group=g)
    # the wrapper's own check: ranks that call different collectives are told so
    try:
        if rank == 0:
            dist.all_reduce(torch.ones(2))
        else:
            dist.broadcast(torch.ones(2), src=0)
        check(False, "mismatched collectives ran under DETAIL")
    except RuntimeError as e:
        check("mismatch" in str(e).lower() or "Detected" in str(e),
              f"mismatched collectives under DETAIL: {e!s:.300}")
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--mode", choices=["api", "torchcomms", "detail"], default="api")
    ap.add_argument("--rank", type=int)
    a = ap.parse_args()
    if not torch_2():
        import torch
        print(f"skipped: torch {torch.__version__} has no c10d::Backend (torch 2.x)", flush=True)
        return SKIP
    if a.rank is None:
        return launch(a.world, a.mode)
    body = {"api": run_api, "torchcomms": run_torchcomms, "detail": run_detail}[a.mode]
    return ranks.rank_main(lambda: checked(body, a.rank, a.world))


def checked(body, rank, world):
    import distcomm_torch  # noqa: F401  (registers "distcomm")

    return ranks.checked(body, rank, world)


if __name__ == "__main__":
    sys.exit(main())
