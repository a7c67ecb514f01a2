#!/usr/bin/env python3
"""DistributedDataParallel over torch.distributed's backend "distcomm" (or "gloo"), on CPU, or
with --device cuda on the one GPU the processes share (CUDA tensors staged through host memory).

A small CNN (or a 29 M-parameter MLP, --model mlp) learns to classify synthetic 32x32x3 images
(noisy copies of 10 random templates), so the loss falls. Run it as any DDP script:

    torchrun --nproc_per_node=2 examples/torch_ddp/train.py --backend distcomm
    build/bin/distcomm-run -np 2 /usr/bin/python3 examples/torch_ddp/train.py --backend distcomm

It finds distcomm_torch in the build tree (build/python) or where DistComm was installed.

--shard-size M splits the global batch into S shards of M samples and makes the gradient
fold(m_0, ..., m_{S-1}) / S over the shards' mean gradients in global order, whatever the number of
processes: each process computes its shards one after another and a DDP communication hook
combines them (an allreduce of sums when each process has one shard, an allgather of the shards
and the same fold otherwise). With DISTCOMM_DETERMINISTIC=1 DistComm's allreduce is that fold, so
1, 2 and 4 processes at the same global batch end with bitwise-equal parameters.
"""

import argparse
import os
import sys
import time


def import_distcomm_torch():
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.path.join(here, "..", "..", "build", "python")
    try:
        import distcomm_torch  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.abspath(build))
        try:
            import distcomm_torch  # noqa: F401
        except ImportError as e:
            sys.exit(f"train.py: backend distcomm needs the distcomm_torch module ({e}); build "
                     "DistComm with python3-torch installed (./scripts/test.sh does) or install it")


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="distcomm", help="torch.distributed backend (distcomm)")
    ap.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=32, help="samples per process per step")
    ap.add_argument("--global-batch", type=int, default=0,
                    help="samples per step over all processes (overrides --batch)")
    ap.add_argument("--shard-size", type=int, default=0,
                    help="fold the gradient over shards of this many samples (see above)")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--fp16-hook", action="store_true", help="DDP's fp16 compression hook")
    ap.add_argument("--no-communication", action="store_true",
                    help="a DDP communication hook that leaves every bucket as it is: the "
                         "processes run side by side without exchanging gradients (the floor "
                         "under what any backend adds to a step; bench.py --floor)")
    ap.add_argument("--fsdp2", action="store_true",
                    help="FSDP2 (fully_shard per top-level layer and at the root) in place of "
                         "DDP (torch 2.6 or later)")
    ap.add_argument("--uneven", action="store_true",
                    help="process r runs steps + r steps, under DDP's Join")
    ap.add_argument("--warmup", type=int, default=3, help="steps left out of the throughput")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where the model trains; cuda: GPU 0, which the processes share")
    ap.add_argument("--save", help="write the final parameters (one flat tensor) here, rank 0; "
                    "every rank when the name has {rank}")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=0,
                    help="the group's timeout in seconds (default: torch.distributed's)")
    return ap.parse_args()


def make_model(kind):
    import torch.nn as nn
    if kind == "cnn":  # 1.6 M parameters, most of them in the first linear layer
        return nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 8 * 8, 384), nn.ReLU(), nn.Linear(384, 10))
    return nn.Sequential(  # 29.4 M parameters, little compute per byte of gradient
        nn.Flatten(), nn.Linear(3 * 32 * 32, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
        nn.Linear(4096, 10))


def shard_fold_hook(shards_per_rank, total_shards, stored):
    """A DDP communication hook: the bucket's gradient becomes the left fold, in global shard
    order, of every shard's mean gradient, divided by the number of shards. `stored` holds this
    process's earlier shards' gradients per parameter (the bucket holds the last one's)."""
    import torch
    import torch.distributed as dist

    def hook(state, bucket):
        buf = bucket.buffer()
        if shards_per_rank == 1:
            # DistComm's deterministic allreduce is the left fold in rank order = shard order.
            fut = dist.all_reduce(buf, async_op=True).get_future()
            return fut.then(lambda f: f.value()[0].div_(total_shards))
        params = bucket.parameters()
        rows = [torch.cat([stored[p][j].reshape(-1) for p in params])
                for j in range(shards_per_rank - 1)]
        local = torch.stack(rows + [buf.clone()])
        everything = torch.empty(dist.get_world_size() * shards_per_rank, buf.numel(),
                                 dtype=buf.dtype)
        fut = dist.all_gather_into_tensor(everything, local, async_op=True).get_future()

        def fold(f):
            acc = everything[0].clone()
            for s in range(1, everything.shape[0]):
                acc += everything[s]
            return acc.div_(total_shards)
        return fut.then(fold)
    return hook


def main():
    a = parse()
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(a.threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit(f"train.py: --device cuda: this torch ({torch.__version__}, CUDA "
                 f"{torch.version.cuda}) sees no GPU")
    dev = torch.device("cuda", 0) if a.device == "cuda" else torch.device("cpu")
    if a.backend == "distcomm":
        import_distcomm_torch()
    group = {}
    if a.timeout:
        import datetime
        group["timeout"] = datetime.timedelta(seconds=a.timeout)
    if "RANK" in os.environ:  # torchrun, distcomm-run, a Kubeflow PyTorchJob, ...
        dist.init_process_group(a.backend, **group)
    else:  # run alone, without a launcher
        import tempfile
        store = tempfile.NamedTemporaryFile(prefix="torch_ddp-", delete=False).name
        dist.init_process_group(a.backend, init_method="file://" + store, rank=0, world_size=1,
                                **group)
    rank, world = dist.get_rank(), dist.get_world_size()

    per_rank = a.global_batch // world if a.global_batch else a.batch
    if a.global_batch and a.global_batch % world:
        sys.exit(f"train.py: --global-batch {a.global_batch} does not split over {world} processes")
    shard = a.shard_size or per_rank
    if per_rank % shard:
        sys.exit(f"train.py: --shard-size {shard} does not divide the {per_rank} samples a "
                 "process takes per step")
    k = per_rank // shard
    total_shards = k * world
    global_batch = per_rank * world

    # The data: the same on every process; each step takes the next global batch of it.
    # Each of 10 classes is a random template image; a sample is its class's template plus as
    # much noise.
    g = torch.Generator().manual_seed(a.seed)
    templates = torch.randn(10, 3, 32, 32, generator=g)
    labels = torch.randint(0, 10, (1024,), generator=g)
    data = (templates[labels] + torch.randn(1024, 3, 32, 32, generator=g)).to(dev)
    labels = labels.to(dev)

    torch.manual_seed(a.seed)  # same initial parameters everywhere (DDP broadcasts rank 0's too)
    model = make_model(a.model).to(dev)
    if a.fsdp2:
        if a.shard_size or a.fp16_hook or a.uneven or a.no_communication:
            sys.exit("train.py: --fsdp2 takes none of --shard-size, --fp16-hook, --uneven, "
                     "--no-communication")
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh(dev.type, (world,))
        for layer in model.children():
            if any(True for _ in layer.parameters()):
                fully_shard(layer, mesh=mesh)
        ddp = fully_shard(model, mesh=mesh)
    else:
        ddp = DDP(model, device_ids=[0] if a.device == "cuda" else None)
    stored = {}
    if a.fp16_hook:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif a.shard_size:
        ddp.register_comm_hook(None, shard_fold_hook(k, total_shards, stored))
    elif a.no_communication:
        def local_only(state, bucket):
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut
        ddp.register_comm_hook(None, local_only)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)

    def batch_of(step, s):  # shard s of the global batch of this step
        first = (step * global_batch + s * shard) % len(data)
        idx = (torch.arange(first, first + shard) % len(data)).to(dev)
        return data[idx], labels[idx]

    def train_step(step):
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for j in range(k):
            x, y = batch_of(step, rank * k + j)
            if j < k - 1:
                with ddp.no_sync():
                    loss = F.cross_entropy(ddp(x), y)
                    loss.backward()
                for p in model.parameters():
                    stored.setdefault(p, [None] * (k - 1))[j] = p.grad
                    p.grad = None
            else:
                loss = F.cross_entropy(ddp(x), y)
                loss.backward()
            loss_sum += loss.item()
        opt.step()
        return loss_sum / k

    steps = a.steps + (rank if a.uneven else 0)
    t0, timed = None, 0
    if a.uneven:
        from torch.distributed.algorithms.join import Join
        with Join([ddp]):
            for step in range(steps):
                loss = train_step(step)
                if rank == 0 and (step % 10 == 0 or step == steps - 1):
                    print(f"step {step:4d}  loss {loss:.4f}", flush=True)
    else:
        for step in range(steps):
            if step == a.warmup:
                t0 = time.perf_counter()
            loss = train_step(step)
            if step >= a.warmup:
                timed += 1
            if rank == 0 and (step % 10 == 0 or step == steps - 1):
                print(f"step {step:4d}  loss {loss:.4f}", flush=True)
    if t0 is not None and timed:
        elapsed = time.perf_counter() - t0
        if rank == 0:
            print(f"throughput {timed * global_batch / elapsed:.1f} samples/s "
                  f"({world} processes x {per_rank} samples, {a.model}, backend {a.backend}"
                  f"{', fsdp2' if a.fsdp2 else ''})",
                  flush=True)
    if a.save and (rank == 0 or "{rank}" in a.save):
        torch.save(torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()]),
                   a.save.replace("{rank}", str(rank)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
