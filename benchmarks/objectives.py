"""Analytic step-time model of data-parallel training: the tuner benchmark's objectives.

Each :class:`Scenario` is a job on a cluster (machines, workers per machine, dedicated
Summation Service processes, NIC bandwidth, per-message latency, ...). ``step_time``
turns a configuration of :mod:`autotune.tuning.space` into a training-step time with the
formulas of the papers, kept deliberately transparent:

- **Bandwidth.** Ring all-reduce moves ``2(n-1)/n * M`` bytes per NIC; BytePS push/pull
  with k dedicated servers ``2n(n-1)/(n^2+kn-2k) * M`` (the BytePS paper (OSDI 2020, §4.1); k=0 equals the
  all-reduce volume). ``intra=flat`` sends every local worker's copy across the NIC
  (x w); ``root`` and ``scatter`` first reduce inside the machine over PCIe/NVLink.
- **Summation.** Push/pull sums on CPUs: the busiest Summation Service (a server holds
  ``2(n-1)/(n^2+kn-2k)`` of the bytes, a colocated one ``(n-k)/(n^2+kn-2k)``) needs
  ``n * share * M / B_sum``, pipelined with the transfer.
- **Streams.** One flow drives at most ``flow_cap * B`` (a TCP flow's window/CPU limit),
  so ``f`` concurrent flows get ``min(1, f*flow_cap) * B``; flows beyond saturation
  congest (``congestion`` per extra flow) and each stream costs ``stream_cost`` per step.
- **Latency.** Every chunk pays ``alpha`` per message: ``2(N-1)`` ring steps for
  all-reduce over N participants, 2 (push + pull) for push/pull; streams overlap chunks.
- **Chunk pipelining.** Chunks leave while backward runs: the step takes
  ``fwd + max(bwd, T_comm) + T_comm * min(c, M)/M`` — the last chunk's transfer cannot
  hide behind backward (big chunks), while many small chunks pay latency.
- **Codecs** (only where lossy codecs are allowed) divide the bytes on the wire by
  their ratio (set by ``topk_ratio``, ``randomk_ratio``, ``powersgd_rank``) and cost
  encode/decode time per byte plus a fixed launch cost per chunk; chunks smaller than
  ``compress_min_bytes`` travel uncompressed; sparse codecs cannot be summed by a ring,
  so all-reduce falls back to an all-gather of ``(n-1)`` compressed copies.
- **Reduce root.** A root on the NIC's PCIe switch shares it with the NIC: half the
  PCIe bandwidth (the BytePS paper, OSDI 2020, §4.2.3).

Scores are throughputs (samples/s) with multiplicative Gaussian noise per iteration
(2-5 %); a trial's score is the mean over its iterations except the first, which the
session does not score. The optimum is found by evaluating the noise-free model on
every configuration of the space (vectorised with numpy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from autotune.tuning.search.base import canonical_table
from autotune.tuning.space import Config, MiB, SearchSpace

GBIT = 1e9 / 8  # bytes/s in one Gbit/s

# codec -> (wire ratio, encode+decode seconds per original byte, summable by a ring)
CODECS = {
    "none": (1.0, 0.0, True),
    "fp16": (2.0, 0.15e-9, True),
    "bf16": (2.0, 0.12e-9, True),
    "topk": (50.0, 2.0e-9, False),
    "randomk": (10.0, 0.8e-9, False),
    "onebit": (32.0, 0.6e-9, True),
    "powersgd": (64.0, 1.0e-9, True),
}
CODEC_LAUNCH_S = 40e-6  # fixed cost of encoding + decoding one compressed chunk
# codec parameters the model reads, with the value used when a space lacks them
CODEC_PARAM_DEFAULTS = {"topk_ratio": 0.01, "randomk_ratio": 0.1, "powersgd_rank": 4,
                        "compress_min_bytes": 0}

Columns = dict[str, np.ndarray]


def columns(configs: list[Config]) -> Columns:
    """Configurations as one array per parameter (the model works on arrays)."""
    names = list(configs[0])
    return {k: np.array([c[k] for c in configs]) for k in names}


def table_columns(space: SearchSpace, table: np.ndarray) -> Columns:
    """Rows of encoded configurations (``canonical_table``) as value arrays."""
    out = {}
    for i, p in enumerate(space.params):
        values = np.empty(len(p.values), dtype=object if not p.ordinal else float)
        values[:] = list(p.values)
        out[p.name] = values[table[:, i]]
    return out


def codec(cols: Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(wire ratio, seconds per byte, summable) of each configuration's codec.

    topk sends values + indices (ratio ``1/(2 r)``), randomk values only (``1/r``);
    PowerSGD's ratio falls and its cost grows with the rank (``256/rank``)."""
    name = cols["compression"]
    n = len(name)
    unknown = set(np.unique(name)) - set(CODECS)
    if unknown:
        raise KeyError(f"the model has no codec {sorted(unknown)}; add it to CODECS")
    get = {k: cols.get(k, np.full(n, v)).astype(float) for k, v in CODEC_PARAM_DEFAULTS.items()}
    ratio = np.array([CODECS[z][0] for z in name], dtype=float)
    cost = np.array([CODECS[z][1] for z in name], dtype=float)
    summable = np.array([CODECS[z][2] for z in name], dtype=bool)
    ratio = np.where(name == "topk", 1 / (2 * get["topk_ratio"]), ratio)
    ratio = np.where(name == "randomk", 1 / get["randomk_ratio"], ratio)
    rank = get["powersgd_rank"]
    ratio = np.where(name == "powersgd", 256 / rank, ratio)
    cost = np.where(name == "powersgd", cost * (1 + rank / 4), cost)
    return ratio, cost, summable


@dataclass(frozen=True)
class Scenario:
    name: str
    machines: int  # n
    workers: int  # w, workers per machine
    k_max: int  # dedicated Summation Service processes launched
    nic_gbps: float  # B per machine
    alpha_us: float  # per-message latency
    flow_cap: float  # fraction of B one flow can drive
    model_mb: float  # gradient bytes M
    fwd_ms: float
    bwd_ms: float
    batch: int = 32  # samples per worker per step
    congestion: float = 0.01  # slowdown per flow beyond saturation
    stream_cost_us: float = 150.0  # per stream per step
    sum_gbps: float = 40.0  # CPU summation bandwidth of one Summation Service (Gbit/s)
    intra_gbps: float = 100.0  # PCIe (or NVLink) bandwidth inside a machine (Gbit/s)
    nic_switch_workers: tuple[int, ...] = (0,)  # local workers on the NIC's PCIe switch
    lossy: bool = False
    noise: float = 0.03  # per-iteration relative noise (std)
    space_kw: dict = field(default_factory=dict, compare=False, hash=False)

    @cached_property
    def space(self) -> SearchSpace:
        return SearchSpace.build(k_max=self.k_max, workers_per_machine=self.workers,
                                 allow_lossy=self.lossy, **self.space_kw)

    # ---------------------------------------------------------------- the model
    def facts(self) -> tuple[int, int, float, float, float]:
        """``(machines, workers per machine, gradient bytes, NIC bytes/s, latency s)``."""
        return (self.machines, self.workers, self.model_mb * MiB, self.nic_gbps * GBIT,
                self.alpha_us * 1e-6)

    def step_times(self, cols: Columns) -> np.ndarray:
        """Step time (s) of each configuration given as value arrays (see module doc)."""
        n, w, M, B, alpha = self.facts()
        s = cols["streams"].astype(float)
        chunk = cols["chunk_bytes"].astype(float)
        transport = cols["transport"]
        servers = cols["servers"].astype(float)
        intra = cols["intra"] if w > 1 else np.full(len(s), "flat", dtype=object)
        root = cols["reduce_root"]

        ratio, codec_cost, summable = codec(cols)
        chunks = np.maximum(1.0, np.ceil(M / chunk))
        small = chunk < cols.get("compress_min_bytes", np.zeros(len(s))).astype(float)
        ratio = np.where(small, 1.0, ratio)  # chunks too small travel uncompressed
        codec_cost = np.where(small, 0.0, codec_cost)
        summable = summable | small
        lossy = ratio > 1
        t_codec = M * codec_cost + np.where(lossy, chunks * CODEC_LAUNCH_S / np.minimum(s, chunks), 0.0)
        wire = M / ratio

        # intra-machine reduce before / broadcast after the cross-machine exchange
        bi = self.intra_gbps * GBIT
        on_switch = np.isin(root, self.nic_switch_workers)
        t_intra = np.select(
            [intra == "root", intra == "scatter"],
            [2 * (w - 1) * M / np.where(on_switch, bi / 2, bi), np.full(len(s), 2 * (w - 1) / w * M / bi)],
            0.0,
        )
        copies = np.where(intra == "flat", w, 1)  # full copies crossing the NIC
        flows = s * np.where(intra == "root", 1, w)
        sat = math.ceil(1 / self.flow_cap)
        b_eff = B * np.minimum(1.0, flows * self.flow_cap) / (1 + self.congestion * np.maximum(0, flows - sat))

        # all-reduce: ring volume, or an all-gather of sparse codecs' payloads
        volume = np.where(summable, 2 * (n - 1) / n * wire, (n - 1) * wire)
        ar_xfer = copies * volume / b_eff
        ar_msgs = 2 * (np.where(intra == "flat", n * w, n) - 1)
        # push/pull with k dedicated servers (BytePS split)
        k = servers
        denom = n * n + k * n - 2 * k
        pp_xfer = copies * 2 * n * (n - 1) * wire / (denom * b_eff)
        share = np.maximum(np.where(k > 0, 2 * (n - 1) / denom, 0.0), (n - k) / denom)
        pp_sum = n * share * M * copies / (self.sum_gbps * GBIT)
        pp_sum = pp_sum + np.where(lossy, share * M * codec_cost * n, 0.0)  # decode, sum, re-encode
        push = transport == "pushpull"
        t_xfer = np.where(push, np.maximum(pp_xfer, pp_sum), ar_xfer)
        msgs = np.where(push, 2, ar_msgs)

        t_lat = chunks * msgs * alpha / np.minimum(s, chunks) * copies
        t_comm = t_xfer + t_lat + t_codec + t_intra
        tail = t_comm * np.minimum(chunk, M) / M
        overhead = s * self.stream_cost_us * 1e-6
        return self.fwd_ms * 1e-3 + np.maximum(self.bwd_ms * 1e-3, t_comm) + tail + overhead

    def step_time(self, c: Config) -> float:
        return float(self.step_times(columns([c]))[0])

    def throughput(self, c: Config) -> float:
        """Noise-free samples/s of the whole job."""
        return self.machines * self.workers * self.batch / self.step_time(c)

    def measure(self, c: Config, iterations: int, rng: np.random.Generator) -> float:
        """A trial's score: mean noisy throughput over iterations 2..``iterations``."""
        true = self.throughput(c)
        k = max(1, iterations - 1)
        return float(np.mean(true * (1 + self.noise * rng.standard_normal(k))))

    def switch(self, c: Config, rng: np.random.Generator) -> float:
        """The throughput of a trial's first iteration, the switch (which a session does not
        score, but ends a trial clearly slow on it): one noisy iteration; the model has no
        cost of its own for the switch."""
        return float(self.throughput(c) * (1 + self.noise * rng.standard_normal()))

    @cached_property
    def optimum(self) -> tuple[Config, float]:
        """Best configuration and its throughput, by evaluating the model on every
        canonical configuration of the space (the rows of ``canonical_table``, the same
        set as ``space.all_configs()``, enumerated much faster)."""
        table = canonical_table(self.space)
        thr = self.machines * self.workers * self.batch / self.step_times(table_columns(self.space, table))
        i = int(np.argmax(thr))
        return self.space.decode(table[i]), float(thr[i])

    def prior(self):
        """The physics prior a session would build for this job: :func:`autotune.sim.simulate`
        on what it knows (machines, workers, servers, NIC rate and per-flow cap, latency,
        gradient bytes in 100 tensors, forward/backward time). It is the simulator's own
        model, not this objective's formulas: the two disagree (rank correlation 0.4-0.9
        over random configurations), which the Tuner's calibration has to absorb; it
        refits its constants to the trials (:class:`autotune.sim.predict.ModelPrior`)."""
        from dataclasses import replace

        from autotune.sim.cluster import ClusterSpec
        from autotune.sim.job import Job
        from autotune.sim.predict import ModelPrior

        tensors = 100
        job = Job((int(self.model_mb * MiB / tensors),) * tensors,
                  compute_s=(self.fwd_ms + self.bwd_ms) / 1e3,
                  backward_fraction=self.bwd_ms / (self.fwd_ms + self.bwd_ms),
                  batch_per_worker=self.batch)
        multi = self.workers > 1
        cluster = ClusterSpec(machines=self.machines, workers_per_machine=self.workers,
                          nic_gbps=self.nic_gbps, per_flow_gbps=self.flow_cap * self.nic_gbps,
                          latency_us=self.alpha_us, server_machines=self.k_max,
                          cpu_sum_gbps=self.sum_gbps, pcie_gbps=self.intra_gbps,
                          gpus_per_switch=len(self.nic_switch_workers) if multi else None,
                          nic_switch=0 if multi else None)
        # scores here are samples/s over all workers: the prior predicts the same unit
        return ModelPrior(replace(job, batch_per_worker=self.machines * self.workers * self.batch),
                          cluster)

    def regret(self, c: Config) -> float:
        """Normalised regret ``1 - throughput(c) / optimum``."""
        return 1.0 - self.throughput(c) / self.optimum[1]


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("resnet50-8x1-10G", machines=8, workers=1, k_max=0, nic_gbps=10, alpha_us=30,
             flow_cap=0.35, model_mb=98, fwd_ms=25, bwd_ms=50, noise=0.03),
    Scenario("vgg16-4x1-25G-ps", machines=4, workers=1, k_max=4, nic_gbps=25, alpha_us=20,
             flow_cap=0.2, model_mb=528, fwd_ms=40, bwd_ms=80, noise=0.02),
    Scenario("bert-4x4-100G", machines=4, workers=4, k_max=2, nic_gbps=100, alpha_us=10,
             flow_cap=0.08, model_mb=1280, fwd_ms=120, bwd_ms=240, intra_gbps=96,
             nic_switch_workers=(0, 1), noise=0.04),
    Scenario("transformer-16x1-hilat", machines=16, workers=1, k_max=3, nic_gbps=10,
             alpha_us=200, flow_cap=0.5, model_mb=240, fwd_ms=30, bwd_ms=60, noise=0.05),
    Scenario("resnet152-2x8-nvlink", machines=2, workers=8, k_max=0, nic_gbps=25, alpha_us=15,
             flow_cap=0.25, model_mb=230, fwd_ms=35, bwd_ms=70, intra_gbps=1200,
             nic_switch_workers=(0, 1, 2, 3), noise=0.03),
    Scenario("gpt2-8x2-lossy", machines=8, workers=2, k_max=2, nic_gbps=10, alpha_us=40,
             flow_cap=0.3, model_mb=500, fwd_ms=60, bwd_ms=120, lossy=True, noise=0.04),
    Scenario("mobilenet-32x1-1G", machines=32, workers=1, k_max=4, nic_gbps=1, alpha_us=100,
             flow_cap=0.6, model_mb=17, fwd_ms=20, bwd_ms=40, stream_cost_us=400, noise=0.05),
    Scenario("lstm-8x4-lossy-25G", machines=8, workers=4, k_max=4, nic_gbps=25, alpha_us=25,
             flow_cap=0.15, model_mb=300, fwd_ms=10, bwd_ms=20, lossy=True, intra_gbps=96,
             noise=0.03),
    Scenario("dense-2x1-100G-flowcap", machines=2, workers=1, k_max=1, nic_gbps=100, alpha_us=5,
             flow_cap=0.06, model_mb=400, fwd_ms=15, bwd_ms=30, stream_cost_us=60, noise=0.02),
    Scenario("wide-4x2-pcie", machines=4, workers=2, k_max=1, nic_gbps=40, alpha_us=20,
             flow_cap=0.2, model_mb=700, fwd_ms=50, bwd_ms=100, intra_gbps=64, noise=0.035),
)
