"""Rank program for tests/emulate/test_emulate.py, run on emulated hosts (one process per rank).

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
    out["pushpull"] = _pushpull(torch)
    print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()


def _pushpull(torch) -> dict:
    """Average gradients through autotune's Runtime with transport=pushpull over the
    server ranks; workers check every element against the exact average."""
    try:
        from autotune.runtime import Runtime
        from autotune.server import serve
    except Exception as e:  # the runtime is not there (yet)
        return {"skipped": f"autotune.runtime unavailable: {type(e).__name__}: {e}"}
    rt = Runtime.bootstrap(timeout=120)
    info = rt.info
    rec: dict = {"servers": len(info.servers)}
    if not info.is_worker:
        rec["served"] = serve(rt)
        rt.shutdown()
        return rec
    workers = [r for r in range(info.world_size) if r not in info.servers]
    shapes = [(300, 500), (70_000,), (3,), (64, 64, 3)]
    params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    rt.register(params)
    leader = info.rank == info.leader
    cfg = {"transport": "pushpull", "servers": len(info.servers), "streams": 2,
           "chunk_bytes": 256 * 1024}
    mean = sum(w + 1 for w in workers) / len(workers)
    ok = []
    for it in range(3):  # the first iteration also teaches the runtime the ready order
        rt.sync(cfg if leader else None)
        for p in params:
            p.grad = None
        sum(((info.rank + 1) * (i + 1 + it) * p).sum() for i, p in enumerate(params)).backward()
        rt.wait()
        ok.append(all(torch.equal(p.grad, torch.full_like(p, mean * (i + 1 + it)))
                      for i, p in enumerate(params)))
    rec["iterations_ok"] = ok
    rec["config"] = dict(rt.config or {})
    rt.sync(stop=True) if leader else rt.sync()
    rt.shutdown()
    return rec


if __name__ == "__main__":
    main()
    sys.exit(0)
