"""Unseen jobs: step-time models whose structure the prior was not built from.

The analytic objectives of :mod:`objectives` share their physics with the simulator the
prior runs (:mod:`autotune.sim`): a flow's rate, a ring's volume, a server's share. A
tuner judged on them is judged on its own model. The jobs here keep the same *facts*
(what a session knows before its first trial: machines, workers, servers, link rate and
per-flow cap, latency, gradient bytes, compute time; :meth:`objectives.Scenario.prior`
builds the prior from those alone), but their step time follows other laws:

- **Congestion collapse (incast).** Past ``incast_flows`` concurrent flows through the
  switch (every machine's streams), the link's goodput falls steeply,
  ``1 / (1 + (F / incast_flows)^4)``, instead of the simulator's mild per-flow penalty:
  more streams first help, then ruin.
- **Window-bound flows.** A flow reaches its rate only on chunks much larger than its
  window: ``rate x chunk / (chunk + window_bytes)`` (a TCP flow that never leaves
  slow start on small messages, or an RTT-bound one), so small chunks lose bandwidth,
  not only latency.
- **Codecs whose cost is not linear.** Top-k sorts (``n log n`` in the chunk), PowerSGD
  costs grow with the square of the rank, and every codec shares ``codec_cores`` CPU
  cores with the streams' copies: beyond that many streams, encoding no longer overlaps.
  ``codec_scale`` scales every codec's cost (a slow host).
- **Summation Services that share CPU with the workers.** A worker's machine that sums
  (push/pull with fewer dedicated servers than machines, or the intra-machine reduce on
  a root) slows its own forward and backward by ``sum_steal`` of the summation time:
  colocated servers are not free.
- **A slower machine.** One machine's NIC runs at ``straggler`` of the others': the
  ring waits for it on every step; push/pull only for that machine's own traffic.

Each is a :class:`UnseenJob`, a :class:`objectives.Scenario` whose ``step_times`` is
replaced; its noise, measurement, optimum and prior are the scenario's. Scores are
samples/s with multiplicative noise per iteration, as in :mod:`objectives`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from objectives import GBIT, Columns, Scenario, codec

from autotune.tuning.search.base import canonical_table
from autotune.tuning.space import MiB

SAMPLE = 300  # configurations the prior's rank correlation is taken on


@dataclass(frozen=True)
class UnseenJob(Scenario):
    """A job whose step time follows the laws of the module docstring."""

    incast_flows: float = math.inf  # concurrent flows in the switch before collapse
    window_bytes: float = 0.0       # a flow's window: chunks much larger reach its rate
    codec_cores: float = math.inf   # cores the codecs share with the streams' copies
    codec_scale: float = 1.0        # every codec's cost per byte, scaled
    sum_steal: float = 0.0          # share of a machine's summation time its workers lose
    straggler: float = 1.0          # the slowest machine's NIC, as a share of the others'

    def step_times(self, cols: Columns) -> np.ndarray:
        n, w, M, B, alpha = self.facts()
        s = cols["streams"].astype(float)
        chunk = cols["chunk_bytes"].astype(float)
        push = cols["transport"] == "pushpull"
        k = cols["servers"].astype(float)
        intra = cols["intra"] if w > 1 else np.full(len(s), "flat", dtype=object)
        name = cols["compression"]

        ratio, per_byte, summable = codec(cols)
        small = chunk < cols.get("compress_min_bytes", np.zeros(len(s))).astype(float)
        lossy = (ratio > 1) & ~small
        ratio = np.where(lossy, ratio, 1.0)
        summable = summable | ~lossy
        # codec cost: top-k sorts its chunk; PowerSGD's grows with the rank squared
        per_byte = per_byte * self.codec_scale
        per_byte = np.where(name == "topk", per_byte * np.log2(np.maximum(chunk, 2.0)) / 20, per_byte)
        rank = cols.get("powersgd_rank", np.full(len(s), 4)).astype(float)
        per_byte = np.where(name == "powersgd", per_byte * (rank / 4) ** 2, per_byte)
        chunks = np.maximum(1.0, np.ceil(M / chunk))
        overlap = np.minimum(s, self.codec_cores)  # codecs overlap only on free cores
        t_codec = np.where(lossy, (M * per_byte + chunks * 40e-6) / np.maximum(1.0, overlap)
                           * np.maximum(1.0, s / self.codec_cores), 0.0)
        wire = M / ratio

        # the link: per-flow rate ramps with the chunk, collapses past the incast point
        copies = np.where(intra == "flat", w, 1)
        flows = s * np.where(intra == "flat", w, 1)
        per_flow = self.flow_cap * B * chunk / (chunk + self.window_bytes)
        rate = np.minimum(B, flows * per_flow)
        rate = rate / (1 + (flows * n / self.incast_flows) ** 4)
        slow = rate * self.straggler

        # inside a machine: a reduce to a root and back over PCIe, or a reduce-scatter
        bi = self.intra_gbps * GBIT
        t_intra = np.select([intra == "root", intra == "scatter"],
                            [2 * (w - 1) * M / bi, np.full(len(s), 2 * (w - 1) / w * M / bi)], 0.0)

        # all-reduce: the ring moves at its slowest link; sparse codecs all-gather
        volume = np.where(summable, 2 * (n - 1) / n * wire, (n - 1) * wire)
        ar = copies * volume / slow + 2 * (n * np.where(intra == "flat", w, 1) - 1) * alpha * chunks / np.minimum(s, chunks)
        # push/pull: dedicated servers take k of n shares; the slow machine waits for its own
        denom = n * n + k * n - 2 * k
        pp_bytes = copies * 2 * n * (n - 1) * wire / denom
        pp = np.maximum(pp_bytes / rate, 2 * copies * wire / n / slow) + 2 * alpha * chunks / np.minimum(s, chunks)
        colocated = np.where(push, np.maximum(0.0, (n - k)) / denom * n * M * copies, 0.0)
        t_sum = colocated / (self.sum_gbps * GBIT)
        pp = np.maximum(pp, t_sum)
        t_comm = np.where(push, pp, ar) + t_codec + t_intra
        # colocated summation and the root's reduce steal the workers' CPU
        steal = self.sum_steal * (t_sum + np.where(intra == "root", t_intra / 2, 0.0))
        fwd, bwd = self.fwd_ms * 1e-3 + steal / 2, self.bwd_ms * 1e-3 + steal / 2
        tail = t_comm * np.minimum(chunk, M) / M
        return fwd + np.maximum(bwd, t_comm) + tail + s * self.stream_cost_us * 1e-6

    measured = SAMPLE  # configurations :meth:`rank_correlation` compares on

    def rank_correlation(self) -> dict[str, Any]:
        """Kendall's tau and Spearman's rho between the prior's predictions and the true
        throughput, on :data:`SAMPLE` configurations drawn at random (seed 0)."""
        from scipy.stats import kendalltau, spearmanr

        table = canonical_table(self.space)
        rows = np.random.default_rng(0).choice(len(table), size=min(SAMPLE, len(table)),
                                               replace=False)
        configs = [self.space.decode(table[i]) for i in rows]
        predicted = np.asarray(self.prior()(configs), dtype=float)
        true = np.array([self.throughput(c) for c in configs])
        return {"kendall_tau": float(kendalltau(predicted, true).statistic),
                "spearman_rho": float(spearmanr(predicted, true).statistic),
                "configurations": len(configs)}


UNSEEN: tuple[UnseenJob, ...] = (
    UnseenJob("u-cloud-codecs-4x1", machines=4, workers=1, k_max=1, nic_gbps=10, alpha_us=60,
              flow_cap=0.25, model_mb=350, fwd_ms=30, bwd_ms=60, lossy=True, noise=0.04,
              window_bytes=2 * MiB, codec_cores=2, codec_scale=3.0),
    UnseenJob("u-incast-16x1", machines=16, workers=1, k_max=2, nic_gbps=25, alpha_us=20,
              flow_cap=0.2, model_mb=200, fwd_ms=20, bwd_ms=40, noise=0.03,
              incast_flows=56),
    UnseenJob("u-colocated-4x2", machines=4, workers=2, k_max=2, nic_gbps=25, alpha_us=15,
              flow_cap=0.3, model_mb=400, fwd_ms=40, bwd_ms=80, sum_gbps=12, noise=0.03,
              sum_steal=2.5, intra_gbps=64),
    UnseenJob("u-window-8x1-hilat", machines=8, workers=1, k_max=2, nic_gbps=10, alpha_us=250,
              flow_cap=0.4, model_mb=150, fwd_ms=25, bwd_ms=50, noise=0.04,
              window_bytes=8 * MiB),
    UnseenJob("u-straggler-6x2", machines=6, workers=2, k_max=3, nic_gbps=25, alpha_us=20,
              flow_cap=0.25, model_mb=500, fwd_ms=50, bwd_ms=100, noise=0.035,
              straggler=0.4, intra_gbps=96),
    UnseenJob("u-lossy-incast-8x2", machines=8, workers=2, k_max=2, nic_gbps=10, alpha_us=40,
              flow_cap=0.3, model_mb=500, fwd_ms=60, bwd_ms=120, lossy=True, noise=0.04,
              incast_flows=40, codec_cores=4, codec_scale=2.0, sum_steal=1.0),
)
