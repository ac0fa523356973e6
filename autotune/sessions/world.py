"""The ``torch.distributed`` world a session runs in: made from the environment when the
user has not made it (and then ended at exit), with an error that says how to start the
script when there is none to make."""

from __future__ import annotations

import atexit
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from autotune.runtime.errors import UsageError


def init_world(timeout: float) -> None:
    """Initialise ``torch.distributed`` from the environment unless the user has."""
    if dist.is_initialized():
        return
    needed = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
    missing = [k for k in needed if k not in os.environ]
    if missing:
        raise UsageError(
            "autotune.session() needs a torch.distributed world"
            + (launcher_hint() or ": start the script with `autotune launch --workers N "
               "script.py` or `torchrun`, or call torch.distributed.init_process_group() "
               f"first (missing env: {', '.join(missing)})"))
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    atexit.register(_destroy_world)  # the session made the world, so it ends it at exit


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
