"""DistComm as a torch.distributed backend.

    import distcomm_torch            # registers the backend "distcomm"
    import torch.distributed as dist
    dist.init_process_group("distcomm")   # env://, tcp://, file:// or torchrun, as any backend

Installed with pip (``pip install --no-build-isolation ./bindings/torch``), "distcomm" needs no
import at all: torch loads it through the package's entry points (_distcomm_torch_autoload).

The transport under it is DistComm's DISTCOMM_BACKEND (shm, gloo, ucx, mpi, a plugin), else the
fastest built for the group (``distcomm_torch.backend_for(world_size, one_host)``). The rendezvous
goes through the store PyTorch hands the group: no second port. See docs/TORCH.md.
"""

import atexit as _atexit
import inspect as _inspect

import torch.distributed as _dist

from ._C import ProcessGroupDistComm, backend_for, create_process_group, __version__
from ._C import _settle_at_exit

# At the interpreter's exit, before Python finalizes, the calls still running on any group end
# first: a group's thread that lets a tensor go while Python finalizes is ended by Python, and
# the process with it (src/call_order.hpp).
_atexit.register(_settle_at_exit)

BACKEND_NAME = "distcomm"

# The device types a group serves (CUDA tensors go through host memory), on torch 2.x.
DEVICES = ["cpu", "cuda"]


def _create(opts, backend_options=None):
    """torch's extended creator API (every version since 1.13): the group's name and its
    members' global ranks come with the store, rank, size and timeout; the default group's list
    is empty on some versions (every rank then)."""
    ranks = list(opts.global_ranks_in_group) or list(range(opts.group_size))
    return create_process_group(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                                str(opts.group_id), ranks)


def backend_of(group=None):
    """The ProcessGroupDistComm under `group` (default: the default group), for its `transport`
    ("shm/auto") and its own methods: on torch 2.x the group's backend for "cpu", on 1.13 the
    group itself."""
    group = group or _dist.distributed_c10d._get_default_group()
    if hasattr(group, "_get_backend"):
        import torch
        group = group._get_backend(torch.device("cpu"))
    if not isinstance(group, ProcessGroupDistComm):
        raise TypeError(f"the group's backend is {type(group).__name__}, not distcomm's")
    return group


def register():
    """Registers "distcomm" with torch.distributed, once (importing the package does)."""
    if hasattr(_dist.Backend, BACKEND_NAME.upper()):
        return
    if "devices" in _inspect.signature(_dist.Backend.register_backend).parameters:
        _dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=DEVICES)
    else:  # torch 1.13
        _dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True)


register()

__all__ = ["BACKEND_NAME", "DEVICES", "ProcessGroupDistComm", "backend_for", "backend_of",
           "create_process_group", "register", "__version__"]
