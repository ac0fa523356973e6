"""The rank program behind :func:`autotune.emulate.measure_bandwidth` (2 ranks, gloo).

``python -m autotune.emulate.probe_job --bytes N --repeats R [--streams S] [--duplex]``
under torchrun's environment. Rank 0 sends N bytes to rank 1 (split over S process
groups, one thread each), rank 1 acknowledges with one element, rank 0 times send-start
to ack; with ``--duplex`` rank 1 sends N bytes back at the same time. Rank 0 prints
``LINKPROBE {"samples_s": [...], "bytes": N}``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

from autotune.emulate.linkprobe import MARK


def _transfer(dist, rank: int, sendbufs: list, recvbufs: list, groups: dict, ack) -> float:
    """One timed transfer; returns seconds (meaningful on rank 0).

    ``groups[r]``: the process groups carrying data sent by rank ``r`` (one per stream;
    empty for a rank that does not send), so each direction has its own connections.
    """
    peer = 1 - rank
    errors: list[BaseException] = []

    def run(op, buf, group) -> None:
        try:
            op(buf, peer, group=group)
        except BaseException as e:  # pragma: no cover - surfaced below
            errors.append(e)

    jobs = [threading.Thread(target=run, args=(dist.send, b, g))
            for b, g in zip(sendbufs, groups[rank])]
    jobs += [threading.Thread(target=run, args=(dist.recv, b, g))
             for b, g in zip(recvbufs, groups[peer])]
    t0 = time.perf_counter()
    for j in jobs:
        j.start()
    for j in jobs:
        j.join()
    if errors:
        raise errors[0]
    if rank == 1:
        dist.send(ack, 0)
    else:
        dist.recv(ack, 1)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=int, default=8 << 20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--duplex", action="store_true")
    a = ap.parse_args(argv)

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        rank = dist.get_rank()
        if dist.get_world_size() != 2:
            raise SystemExit("probe_job needs exactly 2 ranks")
        s = a.streams
        groups = {0: [dist.new_group([0, 1]) for _ in range(s)],
                  1: [dist.new_group([0, 1]) for _ in range(s)] if a.duplex else []}
        per = max(1, a.bytes // 4 // s)
        sendbufs = [torch.full((per,), float(rank + 1)) for _ in groups[rank]]
        recvbufs = [torch.zeros(per) for _ in groups[1 - rank]]
        ack = torch.zeros(1)
        warm = min(per, 1 << 18)  # warm-up: connections and congestion windows
        _transfer(dist, rank, [b[:warm] for b in sendbufs], [b[:warm] for b in recvbufs], groups, ack)
        samples = []
        for _ in range(a.repeats):
            dist.barrier()
            samples.append(_transfer(dist, rank, sendbufs, recvbufs, groups, ack))
        if not all(bool((b == float(2 - rank)).all()) for b in recvbufs):
            raise SystemExit(f"rank {rank}: received data is corrupted")
        if rank == 0:
            print(MARK + json.dumps({"samples_s": samples, "bytes": per * 4 * s}), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
