#!/usr/bin/env python3
"""PyTorch's own DDP communication hooks over "distcomm", each beside the same training run over
gloo: allreduce_hook, fp16_compress_hook, bf16_compress_hook, powerSGD_hook and
batched_powerSGD_hook. PowerSGD's hooks start collectives from inside a future's callback and
wait on them there, which is what this checks above all. For each hook, every rank trains the same
model on its own data over both groups; the ranks' parameters must be bitwise equal within each
group, and distcomm's loss curve and parameters must match gloo's within float tolerance. Run
without arguments it starts WORLD ranks as separate processes and fails when any rank fails.

    test_ddp_hooks.py [--world 2] [--hook NAME]...
"""

import argparse
import datetime
import sys
import time

import ranks

STEPS = 20


def launch(world, only):
    def argv_of(rank):
        args = [__file__, "--rank", str(rank), "--world", str(world)]
        for h in only:
            args += ["--hook", h]
        return args
    ranks.own_environment()
    return ranks.launch(world, argv_of)


def hooks():
    """name: (the hook over distcomm, the same computation over gloo, its state made per group)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as default
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

    # PyTorch 1.13's batched_powerSGD_hook orthogonalizes its 2-D Q matrix with a helper that
    # asserts a batch of matrices (3-D), so it fails on its first compressed step over any
    # backend. Seen as the batch of one it is, it runs as written.
    orthogonalize = powersgd._orthogonalize
    powersgd._orthogonalize = lambda m, *a, **k: orthogonalize(
        m.unsqueeze(0) if m.dim() == 2 else m, *a, **k)

    # PyTorch 1.13's DDP refuses bf16_compress_hook by name unless built with NCCL 2.10+ (a check
    # for its GPU path); the hook is plain collectives, registered here under another name.
    def bf16_compress(state, bucket):
        return default.bf16_compress_hook(state, bucket)

    # gloo has no bfloat16 sum: the same arithmetic, the bfloat16 values summed in float32 and
    # rounded back to bfloat16 (bitwise what a bfloat16 sum of 2 ranks gives).
    def bf16_reference(pg, bucket):
        compressed = bucket.buffer().to(torch.bfloat16).div_(pg.size()).to(torch.float32)
        fut = dist.all_reduce(compressed, group=pg, async_op=True).get_future()

        def decompress(fut):
            return bucket.buffer().copy_(fut.value()[0].to(torch.bfloat16))
        return fut.then(decompress)

    # PowerSGD's callbacks start collectives while the backward pass calls the next bucket's
    # hook, each rank in its own order; gloo takes calls in the order they come (a tag each), so
    # there the ranks mismatch (seen hanging on torch 2.15). "distcomm" orders them as on a
    # stream (call_order.hpp): a callback's calls right after the call it follows. The same
    # order over gloo: each bucket's hook waited for before the next bucket's.
    def serialized(hook):
        def run(state, bucket):
            fut = hook(state, bucket)
            fut.wait()
            return fut
        return run

    def power_state(pg):
        return powersgd.PowerSGDState(process_group=pg, matrix_approximation_rank=1,
                                      start_powerSGD_iter=2, random_seed=7)

    def plain(pg):
        return pg

    return {
        "allreduce_hook": (default.allreduce_hook, default.allreduce_hook, plain),
        "fp16_compress_hook": (default.fp16_compress_hook, default.fp16_compress_hook, plain),
        "bf16_compress_hook": (bf16_compress, bf16_reference, plain),
        "powerSGD_hook": (powersgd.powerSGD_hook, serialized(powersgd.powerSGD_hook),
                          power_state),
        "batched_powerSGD_hook": (powersgd.batched_powerSGD_hook,
                                  serialized(powersgd.batched_powerSGD_hook), power_state),
    }


def train(rank, pg, hook, make_state):
    """STEPS steps of DDP over `pg` with `hook`: the local losses and the final parameters."""
    import torch
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 48), nn.Tanh(), nn.Linear(48, 48), nn.Tanh(),
                          nn.Linear(48, 4))
    # Small buckets: several hooks in flight in one backward pass.
    ddp = DDP(model, process_group=pg, bucket_cap_mb=0.004)
    ddp.register_comm_hook(make_state(pg), hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(16, 32, generator=gen)
        y = torch.randn(16, 4, generator=gen)
        opt.zero_grad()
        loss = (ddp(x) - y).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    return losses, flat


def run_rank(rank, world, only):
    import torch
    import torch.distributed as dist
    import distcomm_torch  # noqa: F401  (registers "distcomm")

    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=60)
    dist.init_process_group("distcomm", rank=rank, world_size=world, timeout=timeout)
    groups = {"distcomm": dist.group.WORLD,
              "gloo": dist.new_group(list(range(world)), backend="gloo", timeout=timeout)}
    failures = []
    for name, (hook, reference, make_state) in hooks().items():
        if only and name not in only:
            continue
        runs = {}
        for backend, pg in groups.items():
            start = time.monotonic()
            try:
                used = hook if backend == "distcomm" else reference
                losses, flat = train(rank, pg, used, make_state)
            except Exception as e:  # the other ranks fail the same way, or time out
                failures.append(f"{name} over {backend}: {type(e).__name__}: {e}")
                break
            seconds = time.monotonic() - start
            runs[backend] = (losses, flat)
            gathered = [torch.empty_like(flat) for _ in range(world)]
            dist.all_gather(gathered, flat, group=groups["gloo"])
            if not all(bool(torch.equal(g, gathered[0])) for g in gathered):
                failures.append(f"{name} over {backend}: the ranks' parameters differ")
            if rank == 0:
                print(f"{name} over {backend}: {STEPS} steps in {seconds:.2f} s, "
                      f"last loss {losses[-1]:.6f}", flush=True)
        if len(runs) == 2:
            (dl, dp), (gl, gp) = runs["distcomm"], runs["gloo"]
            if not all(abs(a - b) <= 1e-4 * max(1.0, abs(b)) for a, b in zip(dl, gl)):
                failures.append(f"{name}: loss curves differ: distcomm {dl}, gloo {gl}")
            if not torch.allclose(dp, gp, rtol=1e-4, atol=1e-5):
                failures.append(f"{name}: parameters differ from gloo's by "
                                f"{(dp - gp).abs().max().item():.3g}")
    dist.destroy_process_group()
    for f in failures:
        print(f"rank {rank}: FAILED {f}", flush=True)
    if not failures:
        print(f"rank {rank}: all checks passed", flush=True)
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--hook", action="append", default=[], help="only this hook (repeatable)")
    ap.add_argument("--rank", type=int)
    a = ap.parse_args()
    if a.rank is None:
        return launch(a.world, a.hook)
    return ranks.rank_main(lambda: run_rank(a.rank, a.world, a.hook))


if __name__ == "__main__":
    sys.exit(main())
