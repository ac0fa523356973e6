"""A dedicated Summation Service process: ``python -m autotune.server``.

Joins the ``torch.distributed`` world from the environment (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``, as set by ``autotune launch`` or ``torchrun``), then
serves whatever plan the workers use, one iteration per ``sync``, until the leader's
``sync(stop=True)``. It sums; it never runs an optimizer (BytePS §5).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from autotune.runtime.errors import ConfigError, RuntimeFault


def serve(rt: Any) -> int:
    """Loop ``rt.sync()`` / ``rt.serve_iteration()`` until stopped; returns iterations served.

    A :class:`ConfigError` or recoverable :class:`RuntimeFault` from ``sync`` was raised
    on every rank alike; the workers decide what comes next, so the server keeps serving.
    """
    served = 0
    while True:
        try:
            rt.sync()
        except ConfigError:
            continue
        except RuntimeFault as e:
            if e.recoverable:
                continue
            raise
        if rt.stopped:
            return served
        rt.serve_iteration()
        served += 1


def main() -> int:
    import torch.distributed as dist

    from autotune.runtime import Runtime

    timeout = float(os.environ.get("AUTOTUNE_TIMEOUT", "300"))
    dist.init_process_group("gloo")
    rt = Runtime.bootstrap(timeout=timeout, role="server")
    try:
        serve(rt)
    finally:
        rt.shutdown()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
