#!/usr/bin/env python3
"""What people train with on torch 2.x, over "distcomm", each beside the same script over gloo.
For a case, the same job runs twice, once with every group on gloo and once on "distcomm"; each
rank saves its losses and its final parameters (whole tensors: a shard's or a DTensor's gathered),
and the test compares: within a job the ranks must agree on the parameters, and distcomm's run
must match gloo's within the ops' rounding (reported: bitwise or the largest difference).

    test_training.py --case CASE [--world N] [--launcher ranks|torchrun]

  ddp_static_graph  DDP with static_graph=True (its buckets rebuilt after the first step)
  zero              DDP with ZeroRedundancyOptimizer (Adam): each rank steps its shard and
                    broadcasts it
  fsdp2             fully_shard over init_device_mesh("cpu", (N,)), per layer and at the root
  hsdp              fully_shard over a 2-D mesh ("replicate", "shard") of (2, N/2): reduce-scatter
                    within a shard group, all-reduce across the replicas (N = 4)
  tp                tensor parallelism: parallelize_module with ColwiseParallel and
                    RowwiseParallel plans on a DTensor mesh
  dcp               torch.distributed.checkpoint: an fsdp2 model saved sharded and loaded into a
                    fresh one; the distcomm job also loads gloo's checkpoint (the two backends'
                    files must be interchangeable)

  --launcher torchrun  starts the ranks with torchrun --standalone --nproc-per-node N, no other
                       flag (default: ranks.py's launcher, torchrun's variables set by hand)

A case a torch does not have (FSDP2, DTensor and its checkpoints on 1.13) prints why and exits 77.
"""

import argparse
import datetime
import os
import subprocess
import sys
import tempfile

import ranks

SKIP = 77
STEPS = 6
# The cases, with the torch they need (major, minor) and the world they run at by default.
CASES = {
    "ddp_static_graph": ((1, 13), 2),
    "zero": ((1, 13), 2),
    "fsdp2": ((2, 6), 2),
    "hsdp": ((2, 6), 4),
    "tp": ((2, 6), 2),
    "dcp": ((2, 6), 2),
}


def torch_version():
    import torch
    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def mlp():
    import torch
    import torch.nn as nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(24, 64)
            self.w2 = nn.Linear(64, 40)
            self.w3 = nn.Linear(40, 8)

        def forward(self, x):
            return self.w3(torch.tanh(self.w2(torch.relu(self.w1(x)))))

    torch.manual_seed(0)
    return MLP()


def batches(rank, same_on_every_rank=False):
    import torch
    gen = torch.Generator().manual_seed(1000 if same_on_every_rank else 1000 + rank)
    for _ in range(STEPS):
        yield torch.randn(16, 24, generator=gen), torch.randn(16, 8, generator=gen)


def fit(model, rank, opt=None, same_data=False, params=None):
    import torch
    opt = opt or torch.optim.Adam(params or model.parameters(), lr=0.01)
    losses = []
    for x, y in batches(rank, same_data):
        opt.zero_grad()
        loss = (model(x) - y).square().mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach().full_tensor() if hasattr(loss, "full_tensor")
                            else loss.detach()))
    return losses


def whole(named):
    """{name: the whole tensor}, a DTensor's gathered (every rank calls it, in the same order)."""
    out = {}
    for name, p in named:
        t = p.detach()
        if hasattr(t, "full_tensor"):
            t = t.full_tensor()
        out[name] = t.clone()
    return out


def case_ddp_static_graph(rank, world, backend, workdir):
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = mlp()
    ddp = DDP(model, static_graph=True, bucket_cap_mb=0.002)
    return fit(ddp, rank), whole(model.named_parameters())


def case_zero(rank, world, backend, workdir):
    import torch
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = mlp()
    ddp = DDP(model)
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    losses = fit(ddp, rank, opt=opt)
    opt.consolidate_state_dict(to=0)  # the shards' optimizer states gathered on rank 0
    if rank == 0:
        state = opt.state_dict()["state"]
        assert len(state) == len(list(model.parameters())), "consolidated state misses shards"
    return losses, whole(model.named_parameters())


def device_mesh(backend, shape, names=None):
    """init_device_mesh("cpu", shape), every group of which runs over `backend`."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    for g in mesh.get_all_groups():
        assert dist.get_backend(g) == backend, f"a mesh group runs {dist.get_backend(g)}"
    return mesh


def sharded_mlp(mesh):
    from torch.distributed.fsdp import fully_shard
    model = mlp()
    for layer in (model.w1, model.w2, model.w3):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def case_fsdp2(rank, world, backend, workdir):
    model = sharded_mlp(device_mesh(backend, (world,)))
    losses = fit(model, rank)
    return losses, whole(model.named_parameters())


def case_hsdp(rank, world, backend, workdir):
    mesh = device_mesh(backend, (2, world // 2), ("replicate", "shard"))
    model = sharded_mlp(mesh)
    losses = fit(model, rank)
    return losses, whole(model.named_parameters())


def case_tp(rank, world, backend, workdir):
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    mesh = device_mesh(backend, (world,))
    # w1's output columns and w2's input rows sharded (w2's output all-reduced); w3 replicated.
    model = parallelize_module(mlp(), mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    # Tensor parallelism: every rank sees the same batch.
    losses = fit(model, rank, same_data=True)
    return losses, whole(model.named_parameters())


def case_dcp(rank, world, backend, workdir):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    mesh = device_mesh(backend, (world,))
    model = sharded_mlp(mesh)
    losses = fit(model, rank)
    trained = whole(model.named_parameters())
    own = os.path.join(workdir, f"checkpoint-{backend}")
    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=own)

    def load(path):
        fresh = sharded_mlp(mesh)
        state = {"model": get_model_state_dict(fresh)}
        dcp.load(state, checkpoint_id=path)
        set_model_state_dict(fresh, state["model"])
        return whole(fresh.named_parameters())

    loaded = load(own)
    for name, t in trained.items():
        assert torch.equal(loaded[name], t), f"{name} loaded from the checkpoint differs"
    # The job over gloo ran first: its checkpoint loads here too, bit for bit what gloo trained.
    theirs = os.path.join(workdir, "checkpoint-gloo")
    if backend == "distcomm":
        gloo_trained = torch.load(os.path.join(workdir, "gloo.0.pt"))["params"]
        for name, t in load(theirs).items():
            assert torch.equal(t, gloo_trained[name]), f"{name} of gloo's checkpoint differs"
    dist.barrier()
    return losses, loaded


def run_rank(case, backend, workdir):
    import torch
    import torch.distributed as dist
    import distcomm_torch  # noqa: F401  (registers "distcomm")

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=120))
    losses, params = globals()[f"case_{case}"](rank, world, backend, workdir)
    torch.save({"losses": losses, "params": params},
               os.path.join(workdir, f"{backend}.{rank}.pt"))
    dist.destroy_process_group()
    return 0


def launch(case, world, launcher, backend, workdir):
    def argv_of(_rank):
        return [__file__, "--case", case, "--rank-of", backend, "--workdir", workdir]
    if launcher == "ranks":
        return ranks.launch(world, argv_of)
    # torchrun as a user types it: no flag beyond the process count.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(world)] + argv_of(0)
    try:
        return subprocess.run(cmd, timeout=300).returncode
    except subprocess.TimeoutExpired:
        print(f"torchrun over {backend}: still running after 300 s")
        return 1


def compare(case, world, workdir):
    import torch
    runs = {b: [torch.load(os.path.join(workdir, f"{b}.{r}.pt")) for r in range(world)]
            for b in ("gloo", "distcomm")}
    failures = []
    for backend, outs in runs.items():
        for r, out in enumerate(outs[1:], 1):
            for name, t in out["params"].items():
                if not torch.equal(t, outs[0]["params"][name]):
                    failures.append(f"over {backend}, rank {r}'s {name} differs from rank 0's")
    gloo, ours = runs["gloo"][0], runs["distcomm"][0]
    worst, bitwise = 0.0, True
    for name, g in gloo["params"].items():
        d = ours["params"][name]
        bitwise &= bool(torch.equal(d, g))
        worst = max(worst, (d - g).abs().max().item())
        if not torch.allclose(d, g, rtol=1e-5, atol=1e-6):
            failures.append(f"{name} differs from gloo's by {(d - g).abs().max().item():.3g}")
    for r in range(world):
        dl, gl = runs["distcomm"][r]["losses"], runs["gloo"][r]["losses"]
        if not all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(dl, gl)):
            failures.append(f"rank {r}'s losses differ: distcomm {dl}, gloo {gl}")
    print(f"{case}: {STEPS} steps at world {world}; distcomm's parameters against gloo's: "
          f"{'bitwise equal' if bitwise else f'largest difference {worst:.3g}'}; "
          f"last loss {ours['losses'][-1]:.6f} (gloo {gloo['losses'][-1]:.6f})", flush=True)
    for f in failures:
        print(f"{case}: FAILED {f}", flush=True)
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--world", type=int)
    ap.add_argument("--launcher", choices=("ranks", "torchrun"), default="ranks")
    ap.add_argument("--rank-of", choices=("gloo", "distcomm"), help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank_of:
        return ranks.rank_main(lambda: run_rank(a.case, a.rank_of, a.workdir))
    need, default_world = CASES[a.case]
    if torch_version() < need:
        import torch
        print(f"skipped: {a.case} needs torch {need[0]}.{need[1]} or newer; this is "
              f"{torch.__version__}")
        return SKIP
    world = a.world or default_world
    ranks.own_environment()
    with tempfile.TemporaryDirectory(prefix=f"distcomm-{a.case}-") as workdir:
        for backend in ("gloo", "distcomm"):  # gloo first: dcp loads its checkpoint
            if launch(a.case, world, a.launcher, backend, workdir) != 0:
                print(f"{a.case}: FAILED the job over {backend} (world {world}, "
                      f"{a.launcher})", flush=True)
                return 1
        return compare(a.case, world, workdir)


if __name__ == "__main__":
    sys.exit(main())
