"""Closed-form communication times of the BytePS paper (OSDI 2020, §2.1 Table 1 and §4.1).

n worker machines, k server (CPU-only) machines, M bytes of gradients, B bytes/s per
NIC per direction; sending and receiving overlap (full duplex). The printed Eq. 4 has a
typo: a server machine receives its share from all n workers, so its time is
``n * M_SS_CPU / B`` (this is what makes Eq. 6 follow from Eq. 1-3).
"""

from __future__ import annotations

from autotune.runtime.data.plan import summation_shares


def allreduce_time(n: int, M: float, B: float) -> float:
    """Ring all-reduce among n endpoints: ``2(n-1)M / (nB)``."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return 2 * (n - 1) * M / (n * B)


def byteps_shares(n: int, k: int) -> tuple[float, float]:
    """(share of the bytes each of k servers sums, share each worker machine's colocated
    Summation Service sums): Eq. 1 and 2, ``2(n-1)/(n^2+kn-2k)`` and
    ``(n-k)/(n^2+kn-2k)``, with the fallbacks outside 1 <= k < n (k = 0: colocated PS,
    1/n each; k >= n: non-colocated PS, 1/k per server): the runtime's own split
    (:func:`autotune.runtime.data.plan.summation_shares`). A single worker machine keeps
    everything local."""
    if n == 1 and k >= 0:
        return 0.0, 1.0
    return summation_shares(n, k)


def byteps_time(n: int, k: int, M: float, B: float, server_B: float | None = None) -> float:
    """Push/pull time with the optimal split: ``2n(n-1)M / ((n^2+kn-2k)B)`` for
    1 <= k <= n (Eq. 6); all-reduce's time for k = 0; ``M/B`` for k >= n (Table 1)."""
    server_B = B if server_B is None else server_B
    c, g = byteps_shares(n, k)
    t_gpu = (M * (1 - g) + (n - 1) * g * M) / B  # Eq. 3
    t_cpu = n * c * M / server_B                  # Eq. 4, corrected
    return max(t_gpu, t_cpu) if n > 1 else 0.0
