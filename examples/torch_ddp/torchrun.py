"""The torchrun command line the example's test and benchmark start train.py with.

Not --standalone, whose rendezvous is always port 29400: a second job on this host (or an earlier
one not yet gone) would share its store. A free port and a fresh run id instead. --redirects 1
--tee 1: torchrun 1.13 on Python 3.11 parses its default (0) as None and fails before starting
anything (docs/TORCH.md); 1 is a value it parses.
"""

import socket
import sys
import uuid


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(nproc, script, args):
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
            "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{free_port()}",
            "--rdzv_id", str(uuid.uuid4()), "--redirects", "1", "--tee", "1",
            f"--nproc_per_node={nproc}", script] + list(args)
