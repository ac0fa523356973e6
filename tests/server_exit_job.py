"""A short job with a Summation Service server, for the servers' clean-exit tests
(tests/session/test_server_exit.py): every rank runs this script.

``python server_exit_job.py OUT WAY WORLD`` trains a small MLP for 20 steps under
``autotune.session`` with push/pull through the server fixed (``WAY``: ``native``, the
model itself; ``ddp``, DDP on ``autotune.workers_group()``). ``WORLD``: ``own``, the
script initialises ``torch.distributed`` itself (as the benchmarks and most DDP scripts
do); ``session``, the session does. A server rank that runs it (``AUTOTUNE_ROLE=server``)
serves inside the session's start, or inside ``workers_group()``, and leaves the process
there. Under ``autotune launch`` the server is ``python -m autotune.server`` instead.

At exit, as the last thing the interpreter runs before it finalises (the first
``atexit`` handler registered runs last), each rank writes ``OUT/rank<r>.json``: its OS
threads then and whether a ``torch.distributed`` world is still initialised. A process
group left to the interpreter's finalisation is what aborts a process at exit
(``terminate called without an active exception``, PyTorch issue #65237).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path


def _at_exit(out: Path, rank: int) -> None:
    import torch.distributed as dist

    out.joinpath(f"rank{rank}.json").write_text(json.dumps({
        "threads": len(os.listdir(f"/proc/{os.getpid()}/task")),
        "world": dist.is_initialized(),
        "role": os.environ.get("AUTOTUNE_ROLE", "worker")}))


def main(out: Path, way: str, world: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    import autotune

    torch.set_num_threads(1)
    if world == "own":
        # The optimizer's first use imports torch._dynamo, and with it
        # torch.distributed.nn.functional, whose defaults capture the world's process
        # group as it is then (group=group.WORLD): after init_process_group, that pins
        # the world's gloo threads until the interpreter finalises, whoever destroys it.
        # Imported first here, as most scripts do by making the optimizer early, so that
        # what is measured at exit is what autotune leaves.
        import torch._dynamo  # noqa: F401

        dist.init_process_group("gloo")
    torch.manual_seed(0)
    model: nn.Module = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 16))
    if way == "ddp":
        model = DDP(model, process_group=autotune.workers_group())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    fixed = {"transport": "pushpull", "servers": 1, "streams": 2, "chunk_bytes": 16384}
    with autotune.session(model, fixed=fixed, store=False, verbose=False) as session:
        for _ in range(20):
            model(torch.randn(8, 64)).pow(2).mean().backward()
            session.step()
            opt.step()
            opt.zero_grad()
    if world == "own":
        dist.destroy_process_group()


if __name__ == "__main__":
    out = Path(sys.argv[1])
    atexit.register(_at_exit, out, int(os.environ["RANK"]))
    main(out, sys.argv[2], sys.argv[3])
