"""A rank of test_pip_install.sh's job: "distcomm" with no import of distcomm_torch."""
import sys

import torch
import torch.distributed as dist

# From torch 2.14 torch loads a backend when a group asks for it, not as it is imported.
lazy = hasattr(dist.Backend, "_ensure_backend_registered")
assert not lazy or "distcomm_torch" not in sys.modules, \
    "torch imported distcomm_torch before a group asked for it"
dist.init_process_group("distcomm")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((4,), float(rank + 1))
dist.all_reduce(t)
assert torch.equal(t, torch.full((4,), float(world * (world + 1) // 2))), t
import distcomm_torch  # noqa: E402  (loaded by now: the group is distcomm's)

name = distcomm_torch.backend_of().name()
assert name == "distcomm", name
print(f"rank {rank}: torch {torch.__version__} loaded \"distcomm\" from "
      f"{distcomm_torch.__file__} through its entry points; all_reduce over "
      f"{distcomm_torch.backend_of().transport}", flush=True)
dist.destroy_process_group()
