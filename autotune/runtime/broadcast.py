"""DDP's habits on the runtime's workers: the leader's tensors broadcast to every worker
(as DDP does with the parameters and buffers at the start), and the check that every
worker holds tensors of the same shapes and dtypes first (a clear error, not a garbled
broadcast). Both are collectives over the workers' group, bounded like every control-plane
operation (``control_op``, the Runtime's, raises a fault naming the rank to blame).
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from .config import ConfigError
from .world import WorldInfo

#: DDP's bucket for its coalesced broadcast (bytes per flat buffer)
BROADCAST_BUCKET = 256 << 20


def broadcast_from_leader(tensors: Sequence[torch.Tensor], what: str, check: bool,
                          info: WorldInfo, group: Any, control_op: Callable[..., Any],
                          describe: Callable[[int], str]) -> None:
    """Overwrite ``tensors`` in place with the leader's values over the workers' ``group``
    (one flat buffer per dtype, copied back in place: DDP's own coalesced broadcast).
    ``check``: first :func:`check_same_shapes`."""
    tensors = [t.detach() for t in tensors]
    if check:
        check_same_shapes(tensors, what, info, group, control_op, describe)
    control_op(f"broadcast of the leader's {what}", dist._broadcast_coalesced,
               group, tensors, BROADCAST_BUCKET, info.leader)


def check_same_shapes(tensors: Sequence[torch.Tensor], what: str, info: WorldInfo, group: Any,
                      control_op: Callable[..., Any], describe: Callable[[int], str]) -> None:
    """Raise :class:`ConfigError` on every worker if the workers' ``tensors`` differ in
    number, shapes or dtypes (one small all-reduce over the workers' ``group``), naming the
    first worker that differs from the leader."""
    shapes = tuple((tuple(t.shape), str(t.dtype)) for t in tensors)
    digest = int.from_bytes(hashlib.sha256(repr(shapes).encode()).digest()[:7], "big")
    workers = info.workers
    rows = torch.zeros(len(workers), 2, dtype=torch.int64)
    rows[workers.index(info.rank)] = torch.tensor([len(tensors), digest])
    control_op(f"check of the {what}", dist.all_reduce, rows, group=group)
    lead = rows[workers.index(info.leader)]
    bad = [w for w, r in zip(workers, rows) if not torch.equal(r, lead)]
    if bad:
        raise ConfigError(f"the workers' {what} differ: {describe(bad[0])} has other "
                          f"shapes or dtypes than the leader (rank {info.leader}); "
                          "every worker must build the same model")
