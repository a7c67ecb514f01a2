"""DistComm as a torch.distributed backend.

    import distcomm_torch            # registers the backend "distcomm"
    import torch.distributed as dist
    dist.init_process_group("distcomm")   # env://, tcp://, file:// or torchrun, as any backend

The transport under it is DistComm's DISTCOMM_BACKEND (gloo, ucx, mpi, a plugin), else the
fastest built for CPU tensors (``distcomm_torch.backend_for(world_size)``). The rendezvous goes
through the store PyTorch hands the group: no second port. See docs/TORCH.md.
"""

import inspect as _inspect

import torch.distributed as _dist

from ._C import ProcessGroupDistComm, backend_for, create_process_group, __version__

BACKEND_NAME = "distcomm"


def _create(store, rank, size, timeout):
    return create_process_group(store, rank, size, timeout)


if not hasattr(_dist.Backend, BACKEND_NAME.upper()):
    if "devices" in _inspect.signature(_dist.Backend.register_backend).parameters:
        # torch 2.x: the device types the backend serves (CUDA tensors go through host memory)
        _dist.Backend.register_backend(BACKEND_NAME, _create, devices=["cpu", "cuda"])
    else:  # torch 1.13
        _dist.Backend.register_backend(BACKEND_NAME, _create)

__all__ = ["BACKEND_NAME", "ProcessGroupDistComm", "backend_for", "create_process_group",
           "__version__"]
