#!/usr/bin/env python3
"""The "distcomm" torch.distributed backend, rank by rank: every collective PyTorch routes to a
process group, with every ReduceOp and dtype DistComm has, async and blocking, subgroups, and the
errors a user sees for what it refuses. Run without arguments it starts WORLD ranks as separate
processes (init method from --init: env, tcp or file) and fails when any rank fails.

    test_process_group.py [--world 2] [--init env|tcp|file] [--transport T] [--device cpu|cuda]

The ranks run with DISTCOMM_TIMEOUT=600 and no other DISTCOMM_* setting but DISTCOMM_BACKEND=T
(--transport): a timeout the program gives (new_group(timeout=...)) must win over it.

With --device cuda the ranks run the collectives on CUDA tensors of one GPU they share (staged
through host memory); without a CUDA torch or a GPU it prints why and skips.
"""

import argparse
import datetime
import gc
import os
import re
import sys
import tempfile
import time
import warnings

import ranks


# The ambient timeout the ranks run with; every timeout the test gives is far shorter.
AMBIENT_TIMEOUT = 600


def launch(world, init, device, transport):
    settings = {"DISTCOMM_TIMEOUT": str(AMBIENT_TIMEOUT)}
    if transport:
        settings["DISTCOMM_BACKEND"] = transport
    ranks.own_environment(**settings)
    port = ranks.free_port()
    tmp = tempfile.mkdtemp(prefix="distcomm-torch-")
    if init == "tcp":
        url = f"tcp://127.0.0.1:{port}"
    elif init == "file":
        url = "file://" + os.path.join(tmp, "store")
    else:
        url = "env://"
    return ranks.launch(world, lambda rank: [__file__, "--rank", str(rank), "--world", str(world),
                                            "--url", url, "--device", device], port=port)


def checked(body, rank, world, url):
    """Runs body(rank, world, check) in a "distcomm" group: 1 when any check failed."""
    import torch.distributed as dist
    import distcomm_torch  # noqa: F401  (registers "distcomm")

    dist.init_process_group("distcomm", init_method=url, rank=rank, world_size=world)
    return ranks.checked(body, rank, world)


def run_cuda(rank, world, check):
    """CUDA: the collectives DDP and FSDP use, on CUDA tensors of the GPU every rank shares."""
    import torch
    import torch.distributed as dist

    p, r, dev = world, rank, torch.device("cuda", 0)
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int64):
        t = torch.full((1000,), r + 1, dtype=dt, device=dev) * 1  # queued on the stream
        dist.all_reduce(t)
        check(t.is_cuda and bool((t == sum(range(1, p + 1))).all()), f"all_reduce {dt}: {t[:3]}")
    # async, through the future DDP chains on: the result is in the CUDA tensor when it fires
    t = torch.full((1 << 20,), float(r), device=dev)
    fut = dist.all_reduce(t, async_op=True).get_future()
    got = fut.then(lambda f: f.value()[0].sum().item()).wait()
    check(got == float(sum(range(p))) * (1 << 20), f"all_reduce future: {got}")
    b = torch.full((7,), float(r), device=dev)
    dist.broadcast(b, src=p - 1)
    check(bool((b == p - 1).all()), f"broadcast: {b}")
    outs = [torch.empty(5, device=dev) for _ in range(p)]
    dist.all_gather(outs, torch.full((5,), float(r), device=dev))
    check(all(bool((o == q).all()) for q, o in enumerate(outs)), f"all_gather: {outs}")
    if hasattr(dist, "all_gather_into_tensor"):
        whole = torch.empty(3 * p, device=dev)
        dist.all_gather_into_tensor(whole, torch.full((3,), float(r), device=dev))
        check(whole.view(p, 3)[:, 0].tolist() == [float(q) for q in range(p)],
              f"all_gather_into_tensor: {whole}")
        part = torch.empty(4, device=dev)
        dist.reduce_scatter_tensor(part, torch.arange(4 * p, dtype=torch.float32, device=dev))
        check(part.tolist() == [float(p * (4 * r + k)) for k in range(4)],
              f"reduce_scatter_tensor: {part}")
    a2a = torch.empty(2 * p, device=dev)
    dist.all_to_all_single(a2a, torch.full((2 * p,), float(r), device=dev))
    check(a2a.view(p, 2)[:, 0].tolist() == [float(q) for q in range(p)], f"all_to_all: {a2a}")
    nxt, prv = (r + 1) % p, (r - 1) % p
    into = torch.empty(4 << 20, device=dev)
    works = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, torch.full((4 << 20,), float(r), device=dev), nxt),
        dist.P2POp(dist.irecv, into, prv)])
    for w in works:
        w.wait()
    check(bool((into == prv).all()), f"isend/irecv: {into[:3]}")
    dist.destroy_process_group()


def run_rank(rank, world, check):
    """CPU: every collective, op and dtype, the errors, subgroups."""
    import torch
    import torch.distributed as dist
    import distcomm_torch

    p, r = world, rank
    group = dist.group.WORLD
    check(dist.get_backend() == "distcomm", f"backend is {dist.get_backend()}")

    # allreduce: every op on every dtype, blocking and async (future and wait)
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
              torch.uint8, torch.int32, torch.int64]
    ops = {dist.ReduceOp.SUM: sum(range(1, p + 1)), dist.ReduceOp.PRODUCT: 1,
           dist.ReduceOp.MIN: 1, dist.ReduceOp.MAX: p}
    for q in range(2, p + 1):
        ops[dist.ReduceOp.PRODUCT] *= q
    for dt in dtypes:
        for op, want in ops.items():
            t = torch.full((37,), r + 1, dtype=dt)
            dist.all_reduce(t, op=op)
            check(bool((t == want).all()), f"all_reduce {op} {dt}: {t[:3].tolist()} != {want}")
        t = torch.full((5,), r + 1, dtype=dt)
        w = dist.all_reduce(t, async_op=True)
        fut = w.get_future()
        got = fut.wait()
        check(bool((got[0] == sum(range(1, p + 1))).all()), f"async all_reduce {dt}: {got}")
        check(w.is_completed(), "work not complete after its future")
    t = torch.full((4,), float(r + 1))
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    check(bool((t == (p + 1) / 2).all()), f"AVG: {t}")

    # allreduce_coalesced (deprecated in Python, still what some callers use)
    a, b = torch.full((3,), float(r)), torch.full((1000,), 2.0 * r)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dist.all_reduce_coalesced([a, b])
    check(bool((a == sum(range(p))).all()) and bool((b == 2 * sum(range(p))).all()), "coalesced")

    # broadcast from every root
    for root in range(p):
        t = torch.arange(10, dtype=torch.float32) * (r + 1)
        dist.broadcast(t, src=root)
        check(bool((t == torch.arange(10) * (root + 1)).all()), f"broadcast root {root}")

    # allgather (list and base), allgather_coalesced through all_gather_object
    outs = [torch.empty(6, dtype=torch.int64) for _ in range(p)]
    dist.all_gather(outs, torch.full((6,), r, dtype=torch.int64))
    check(all(bool((o == q).all()) for q, o in enumerate(outs)), f"all_gather {outs}")
    flat = torch.empty(6 * p)
    dist.all_gather_into_tensor(flat, torch.full((6,), float(r)))
    check(bool((flat.view(p, 6)[:, 0] == torch.arange(p)).all()), "all_gather_into_tensor")
    # An input the caller drops at once stays alive until the collective has read it.
    out = torch.empty(p << 18)
    w = dist.all_gather_into_tensor(out, torch.full((1 << 18,), float(r)), async_op=True)
    gc.collect()
    w.wait()
    check(bool((out.view(p, -1) == torch.arange(p).float().unsqueeze(1)).all()), "dropped input")
    objs = [None] * p
    dist.all_gather_object(objs, {"rank": r, "name": "x" * (r + 1)})
    check(objs == [{"rank": q, "name": "x" * (q + 1)} for q in range(p)], f"objects {objs}")

    # reduce_scatter (list and base)
    out = torch.empty(4)
    dist.reduce_scatter(out, [torch.full((4,), float(q + r)) for q in range(p)])
    check(bool((out == sum(r + q for q in range(p))).all()), f"reduce_scatter {out}")
    out = torch.empty(3)
    dist.reduce_scatter_tensor(out, torch.arange(3 * p, dtype=torch.float32))
    check(bool((out == p * torch.arange(3 * r, 3 * r + 3)).all()), f"reduce_scatter_tensor {out}")

    # all_to_all: equal, with split sizes, and lists
    inp = torch.arange(p * 2, dtype=torch.float32) + 100 * r
    out = torch.empty(p * 2)
    dist.all_to_all_single(out, inp)
    want = torch.cat([torch.arange(2 * r, 2 * r + 2) + 100 * q for q in range(p)]).float()
    check(bool((out == want).all()), f"all_to_all_single {out}")
    send_splits = [q + 1 for q in range(p)]          # rank r sends q+1 rows to rank q
    recv_splits = [r + 1] * p                         # and receives r+1 rows from each
    inp = torch.cat([torch.full((q + 1, 2), float(10 * r + q)) for q in range(p)])
    out = torch.empty(sum(recv_splits), 2)
    dist.all_to_all_single(out, inp, recv_splits, send_splits)
    want = torch.cat([torch.full((r + 1, 2), float(10 * q + r)) for q in range(p)])
    check(bool((out == want).all()), f"all_to_all_single with splits {out}")
    ins = [torch.full((q + 2,), float(r)) for q in range(p)]
    outs = [torch.empty(r + 2) for _ in range(p)]
    dist.all_to_all(outs, ins)
    check(all(bool((o == q).all()) for q, o in enumerate(outs)), f"all_to_all {outs}")

    # reduce, gather, scatter at every root
    for root in range(p):
        t = torch.full((5,), float(r + 1))
        dist.reduce(t, dst=root)
        if r == root:
            check(bool((t == sum(range(1, p + 1))).all()), f"reduce at {root}: {t}")
        g = [torch.empty(3) for _ in range(p)] if r == root else None
        dist.gather(torch.full((3,), float(r)), gather_list=g, dst=root)
        if r == root:
            check(all(bool((x == q).all()) for q, x in enumerate(g)), f"gather at {root}: {g}")
        s = torch.empty(2)
        dist.scatter(s, [torch.full((2,), float(q * 7)) for q in range(p)] if r == root else None,
                     src=root)
        check(bool((s == 7 * r).all()), f"scatter from {root}: {s}")

    # send / recv around a ring, in an order that cannot deadlock
    if p > 1:
        t = torch.full((100,), float(r))
        got = torch.empty(100)
        nxt, prv = (r + 1) % p, (r - 1) % p
        if r % 2 == 0:
            dist.send(t, nxt, tag=3)
            dist.recv(got, prv, tag=3)
        else:
            dist.recv(got, prv, tag=3)
            dist.send(t, nxt, tag=3)
        check(bool((got == prv).all()), f"recv from {prv}: {got[:3]}")

        # batch_isend_irecv: every rank sends 16 MiB right and receives 16 MiB from the left,
        # all posted before any is waited for (the sends too large to leave eagerly)
        big = torch.full((4 << 20,), float(r))
        into = torch.empty(4 << 20)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, big, nxt, tag=4),
                                        dist.P2POp(dist.irecv, into, prv, tag=4)])
        for w in works:
            w.wait()
        check(bool((into == prv).all()), f"batch_isend_irecv, 16 MiB from {prv}: {into[:3]}")

        # recv without src: rank 0 takes one message from every other rank, through recv and
        # through irecv, each saying its sender; transports that match per sender refuse it
        transport = distcomm_torch.backend_of().transport
        if transport.split("/")[0] in ("shm", "gloo", "ucx", "local"):
            if r == 0:
                senders = []
                for k in range(1, p):
                    got = torch.empty(10)
                    if k % 2:
                        q = dist.recv(got, tag=6)
                    else:
                        w = dist.irecv(got, tag=6)
                        w.wait()
                        q = w._source_rank()
                    check(bool((got == q * 3).all()), f"recv from any rank: {q}, {got[:3]}")
                    senders.append(q)
                check(sorted(senders) == list(range(1, p)), f"recv from any rank: {senders}")
            else:
                dist.send(torch.full((10,), float(r * 3)), 0, tag=6)
        elif r == 0:
            try:
                dist.recv(torch.empty(1), tag=6)
                check(False, f"recv from any rank over {transport} completed")
            except RuntimeError as e:
                check("cannot receive from any rank" in str(e), str(e))

    dist.barrier()

    # FSDP's coalesced forms: one allgather (reduce-scatter) of every pair at once (torch 2.1
    # calls them itself; the group's own methods here)
    pg = distcomm_torch.backend_of()
    ins = [torch.full((3,), float(r)), torch.full((2,), float(10 + r))]
    outs = [torch.empty(3 * p), torch.empty(2 * p)]
    pg.allgather_into_tensor_coalesced(outs, ins).wait()
    check(outs[0].view(p, 3)[:, 0].tolist() == [float(q) for q in range(p)] and
          outs[1].view(p, 2)[:, 1].tolist() == [10.0 + q for q in range(p)],
          f"allgather_into_tensor_coalesced: {outs}")
    ins = [torch.arange(4 * p, dtype=torch.float32), torch.arange(2 * p, dtype=torch.float32)]
    outs = [torch.empty(4), torch.empty(2)]
    pg.reduce_scatter_tensor_coalesced(outs, ins).wait()
    check(outs[0].tolist() == [float(p * (4 * r + k)) for k in range(4)] and
          outs[1].tolist() == [float(p * (2 * r + k)) for k in range(2)],
          f"reduce_scatter_tensor_coalesced: {outs}")

    # subgroups: everyone, then each rank alone, then the last two
    everyone = dist.new_group(list(range(p)), backend="distcomm")
    t = torch.ones(8)
    dist.all_reduce(t, group=everyone)
    check(bool((t == p).all()), "new_group of every rank")
    for q in range(p):
        alone = dist.new_group([q], backend="distcomm")
        if q == r:
            t = torch.full((2,), 5.0)
            dist.all_reduce(t, group=alone)
            check(bool((t == 5).all()), "a group of one")
    if p > 2:
        pair = dist.new_group([p - 2, p - 1], backend="distcomm")
        if r >= p - 2:
            t = torch.ones(3)
            dist.all_reduce(t, group=pair)
            check(bool((t == 2).all()), "a pair")

    # what is refused, and how
    def raises(fn, words, what):
        try:
            fn()
        except RuntimeError as e:
            check(all(w in str(e) for w in words), f"{what}: message {e!s:.300}")
            return
        check(False, f"{what}: no error")

    raises(lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool)), ["dtype", "Bool"], "bool")
    raises(lambda: dist.all_reduce(torch.ones(4, 4).t()), ["contiguous"], "non-contiguous")
    raises(lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND),
           ["BAND"], "BAND")
    dist.barrier()  # the refusals happened before anything was sent: the group still works
    t = torch.ones(2)
    dist.all_reduce(t)
    check(bool((t == p).all()), "allreduce after the refusals")

    # Sparse allreduce (sum, as gloo's): an entry every rank has, one of each rank's own, and
    # one more on rank 0 (ranks with different counts)
    idx = [[0, r + 1] + ([p + 1] if r == 0 else [])]
    val = [1.0, float(r + 1)] + ([5.0] if r == 0 else [])
    sp = torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(val), (p + 2,))
    dist.all_reduce(sp)
    want = torch.tensor([float(p)] + [float(q + 1) for q in range(p)] + [5.0])
    check(sp.is_sparse and torch.equal(sp.to_dense(), want), f"sparse allreduce: {sp.to_dense()}")
    raises(lambda: dist.all_reduce(sp, op=dist.ReduceOp.MAX), ["sparse", "sums only"],
           "sparse max")

    # A timeout in PyTorch's words (its suite matches " (Timed out|closed|timeout) "): rank 0
    # alone enters a barrier of a group whose timeout is 2 s. The 2 s win over DISTCOMM_TIMEOUT
    # (AMBIENT_TIMEOUT): the program named them.
    short = dist.new_group(list(range(p)), timeout=datetime.timedelta(seconds=2))
    if r == 0:
        began = time.monotonic()
        try:
            dist.barrier(group=short)
            check(False, "a barrier that rank 0 entered alone completed")
        except RuntimeError as e:
            took = time.monotonic() - began
            check(took < AMBIENT_TIMEOUT / 10, f"the 2 s barrier timed out after {took:.0f} s: "
                  f"DISTCOMM_TIMEOUT={AMBIENT_TIMEOUT} won over the group's own timeout")
            check(re.search(" (Timed out|closed|timeout) ", str(e)) is not None,
                  f"a timeout in other words than PyTorch's: {e!s:.300}")
            check("distcomm: Timed out (BARRIER): " in str(e) and "barrier" in str(e),
                  f"the timeout's message: {e!s:.300}")
    dist.barrier()  # the default group goes on

    # DDP: two steps of a small model; replicas agree afterwards
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    torch.manual_seed(r)
    for _ in range(2):
        opt.zero_grad()
        ddp(torch.randn(4, 8)).square().sum().backward()
        opt.step()
    flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(p)]
    dist.all_gather(gathered, flat)
    check(all(bool(torch.equal(g, gathered[0])) for g in gathered), "DDP replicas differ")

    # The group's sequence number (what TORCH_DISTRIBUTED_DEBUG=DETAIL compares across ranks):
    # the collectives started, the same on every rank
    seq = distcomm_torch.backend_of()._get_sequence_number_for_group()
    seqs = [None] * p
    dist.all_gather_object(seqs, seq)
    check(seq > 0 and all(s == seq for s in seqs), f"sequence numbers {seqs}")

    # Closed while a collective still holds a tensor whose Python object is gone (as DDP's
    # buckets are): the collective letting the tensor go needs the GIL, which the closing thread
    # holds. Before the group let it go while closing, this hung every time.
    dist.all_reduce(torch.ones(1 << 20), async_op=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--init", choices=["env", "tcp", "file"], default="env")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--url")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--transport", default="", help="DISTCOMM_BACKEND for the ranks")
    a = ap.parse_args()
    if a.device == "cuda" and a.rank is None:
        import torch
        if not torch.cuda.is_available():
            print(f"skipped: --device cuda: this torch ({torch.__version__}, CUDA "
                  f"{torch.version.cuda}) sees no GPU", flush=True)
            return 0
    if a.rank is None:
        return launch(a.world, a.init, a.device, a.transport)
    body = run_cuda if a.device == "cuda" else run_rank
    return ranks.rank_main(lambda: checked(body, a.rank, a.world, a.url))


if __name__ == "__main__":
    sys.exit(main())
