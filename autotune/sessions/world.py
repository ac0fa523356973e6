"""The ``torch.distributed`` world a session runs in: made from the environment when the
user has not made it (and then ended at exit); a one-process world where nothing started
the script (plain ``python``, a notebook: none of the launcher's variables set); an error
that says how to start the script when the environment is half set."""

from __future__ import annotations

import atexit
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from autotune.runtime.errors import UsageError


#: what ``autotune launch`` and ``torchrun`` set for every rank
NEEDED = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
#: what a session made outside any launcher says, once
ONE_PROCESS = ("no launcher started this process: training as one worker (a "
               "torch.distributed world of one, made in-process); `autotune launch "
               "--workers N script.py` trains on N")


def init_world(timeout: float) -> str | None:
    """Initialise ``torch.distributed`` from the environment unless the user has; where
    no launcher set any of its variables (and no framework's launcher ran), a world of one
    process on an in-memory store (no port, no file): what it returns then is the line
    to say (:data:`ONE_PROCESS`), else None."""
    if dist.is_initialized():
        return None
    missing = [k for k in NEEDED if k not in os.environ]
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if len(missing) == len(NEEDED) and not launcher_hint():
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1,
                                timeout=timedelta(seconds=timeout))
        atexit.register(_destroy_world)
        return ONE_PROCESS
    if missing:
        raise UsageError(
            "autotune.session() needs a torch.distributed world"
            + (launcher_hint() or ": start the script with `autotune launch --workers N "
               "script.py` or `torchrun`, or call torch.distributed.init_process_group() "
               f"first (missing env: {', '.join(missing)})"))
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    atexit.register(_destroy_world)  # the session made the world, so it ends it at exit
    return None


def launcher_hint() -> str:
    """What to add when a framework's launcher started this script as one process (else
    ""): ``accelerate launch --num_processes 2`` on a machine without GPUs runs one plain
    process (its simple launcher, which sets ``ACCELERATE_USE_CPU`` and no ``RANK``)
    unless told ``--multi_gpu``, which on CPU starts the processes on gloo."""
    if "ACCELERATE_USE_CPU" in os.environ and "WORLD_SIZE" not in os.environ:
        return (", and `accelerate launch` started one process: without GPUs add "
                "`--multi_gpu` (`accelerate launch --multi_gpu --num_processes 2 script.py` "
                "runs gloo on CPU)")
    return ""


def _destroy_world() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
