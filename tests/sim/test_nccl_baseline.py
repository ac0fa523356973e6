"""The NCCL-like baseline (:mod:`autotune.sim.nccl`) against published all-reduce figures.

Published data (none of it was used to build the model, whose constants are NCCL's own
tuning-model numbers):

- BytePS (A Unified Architecture for Accelerating Distributed DNN Training in
  Heterogeneous GPU/CPU Clusters, OSDI 2020), §7.1 and Fig. 12: 8 machines of 1 GPU,
  100 GbE RoCE, point-to-point RDMA goodput about 90 Gbit/s; all-reduce on large
  tensors is "close to the optimal", the line ``2(n-1)M/(nB)`` at B = 90 Gbit/s, with no
  CPU machine (BytePS itself is 1-9% from its optimum).
- The same paper, §7.4: ResNet-50 on 256 V100 (32 machines of 8, NVLink, 100 GbE) with
  Horovod + NCCL all-reduce reaches 88% scaling efficiency (BytePS 97.5%).
- nccl-tests (NVIDIA, doc/PERFORMANCE.md): all-reduce bus bandwidth
  ``algbw * 2(n-1)/n`` "should reflect the speed of the hardware bottleneck",
  independently of the number of ranks.
"""

from __future__ import annotations

import math

import pytest

from autotune.sim import GBIT, ClusterSpec, Job, allreduce_time
from autotune.sim.nccl import (bus_Bps, bus_bandwidth, ddp_nccl, nccl_allreduce,
                               nccl_allreduce_time, nccl_call, nccl_latency_s)

MiB = 1 << 20


def byteps_machine(n: int, nic_gbps: float = 100.0) -> ClusterSpec:
    """BytePS's GPU machine (Fig. 6b): 8 GPUs, 2 per PCIe switch, NVLink, NIC on switch 0."""
    return ClusterSpec(machines=n, workers_per_machine=8, nic_gbps=nic_gbps, gpus_per_switch=2,
                   nic_switch=0, nvlink_gbps=200.0)


# ------------------------------------------------------------ published figures
#: BytePS (OSDI 2020) Fig. 12: all-reduce of large tensors on 8 x 1-GPU machines is close
#: to the optimum at the measured point-to-point goodput of 90 Gbit/s
FIG12 = {"machines": 8, "p2p_gbps": 90.0, "sizes": (64 * MiB, 256 * MiB)}
#: "close": BytePS's own distance from the same optimum is 1-9%, so 10%
FIG12_TOLERANCE = 0.10


@pytest.mark.parametrize("size", FIG12["sizes"])
def test_byteps_fig12_allreduce_goodput_close_to_optimal(size: int) -> None:
    c = ClusterSpec(machines=FIG12["machines"], nic_gbps=FIG12["p2p_gbps"])
    optimum = allreduce_time(FIG12["machines"], size, FIG12["p2p_gbps"] * GBIT)
    call = nccl_allreduce(c, size)
    rel = call.time_s / optimum - 1
    print(f"Fig. 12, {size / MiB:.0f} MiB: {call.algorithm}/{call.protocol} "
          f"{call.time_s * 1e3:.2f} ms vs optimum {optimum * 1e3:.2f} ms: {rel:+.1%}")
    assert 0 <= rel <= FIG12_TOLERANCE
    # a double binary tree would be 2 / (2(n-1)/n) - 1 = 14% off at 8 machines: ring it is
    assert call.algorithm == "ring"


#: BytePS (OSDI 2020) §7.4: Horovod/NCCL all-reduce, ResNet-50, 256 GPUs: 88% scaling
RESNET50_256_ALLREDUCE_EFFICIENCY = 0.88
#: forward + backward of ResNet-50 on one V100 at the batch sizes people use (64 images:
#: about 200 ms in fp32, 70 ms in mixed precision): the paper's batch is in its figure only
RESNET50_COMPUTE_MS = (70.0, 120.0, 200.0)


@pytest.mark.parametrize("compute_ms", RESNET50_COMPUTE_MS)
def test_resnet50_256_gpus_is_an_optimistic_bound_on_published_allreduce(compute_ms: float) -> None:
    """A known miss, asserted as a bound: the model overlaps ResNet-50's 98 MiB with
    backward but for its last bucket (93-98% predicted scaling efficiency for 70-200 ms of
    compute), where Horovod + NCCL
    measured 88%. What it does not model (Horovod's negotiation and fusion cycle,
    stragglers, the first bucket's wait, input pipeline) only slows the real job, so the
    baseline is faster than the published all-reduce: speed-ups against it are
    conservative. The test fails if the model becomes slower than the measurement."""
    job = Job.from_model("resnet50", compute_ms=compute_ms, batch_per_worker=64)
    est = ddp_nccl(job, byteps_machine(32))
    efficiency = job.compute_s / est.step_s
    rel = efficiency / RESNET50_256_ALLREDUCE_EFFICIENCY - 1
    print(f"ResNet-50, 256 GPUs, compute {compute_ms:g} ms: predicted {efficiency:.1%} "
          f"vs published {RESNET50_256_ALLREDUCE_EFFICIENCY:.0%} ({rel:+.1%})")
    assert efficiency >= RESNET50_256_ALLREDUCE_EFFICIENCY
    assert efficiency <= 1.0


#: nccl-tests: the bus bandwidth of large all-reduces is the hardware bottleneck,
#: whatever the rank count; 10% as for Fig. 12 (the model's ring/Simple latency costs
#: 2.3% of a 1 GiB call at 256 ranks on 100 Gbit/s)
@pytest.mark.parametrize("machines", [2, 4, 8, 16, 32])
def test_bus_bandwidth_of_large_allreduce_is_the_nic(machines: int) -> None:
    c = byteps_machine(machines)
    busbw = bus_bandwidth(c, 1 << 30)
    assert bus_Bps(c) == pytest.approx(100 * GBIT)  # the NIC is this machine's bottleneck
    assert 0.90 * 100 * GBIT <= busbw <= 100 * GBIT


# ------------------------------------------------------------ the model's structure
def test_nccl_picks_trees_for_small_messages_at_scale_and_rings_for_large() -> None:
    big = byteps_machine(128)
    assert nccl_allreduce(big, 1 * MiB).algorithm == "tree"
    assert nccl_allreduce(byteps_machine(2), 256 * MiB).algorithm == "ring"
    # small messages take a low-latency protocol, large ones Simple
    assert nccl_allreduce(big, 4096).protocol in ("LL", "LL128")
    assert nccl_allreduce(byteps_machine(4), 1 << 30).protocol == "Simple"


def test_choice_is_the_fastest_of_every_algorithm_and_protocol() -> None:
    c = byteps_machine(16)
    for size in (8, 4096, 1 * MiB, 25 * MiB, 512 * MiB):
        times = [nccl_call(c, size, a, p).time_s for a in ("ring", "tree")
                 for p in ("LL", "LL128", "Simple")]
        assert nccl_allreduce_time(c, size) == min(times)
        assert nccl_allreduce_time(c, size, algorithms=("ring",)) >= min(times)


def test_ring_simple_without_corrections_is_latency_plus_the_paper_formula() -> None:
    c = byteps_machine(8)
    size = 100 * MiB
    call = nccl_allreduce(c, size, algorithms=("ring",), protocols=("Simple",), corrections=False)
    # 8.4 us base + 2(n-1) network steps of 9.6 us + 2(N-n) NVLink steps of 3.4 us
    lat = (8.4 + 2 * 7 * 9.6 + 2 * (64 - 8) * 3.4) * 1e-6
    assert nccl_latency_s(c, "ring", "Simple") == pytest.approx(lat)
    assert call.time_s == pytest.approx(lat + allreduce_time(64, size, 100 * GBIT))
    assert call.nic_bytes == pytest.approx(2 * 63 / 64 * size)


def test_tree_latency_grows_with_log_of_machines_ring_linearly() -> None:
    ring = [nccl_latency_s(byteps_machine(n), "ring", "LL") for n in (16, 32, 64)]
    tree = [nccl_latency_s(byteps_machine(n), "tree", "LL") for n in (16, 32, 64)]
    assert ring[2] - ring[1] == pytest.approx(2 * (ring[1] - ring[0]))
    assert tree[2] - tree[1] == pytest.approx(tree[1] - tree[0])
    assert tree[2] < ring[2]


def test_bus_bandwidth_follows_the_slowest_link() -> None:
    assert bus_Bps(byteps_machine(4, nic_gbps=25)) == pytest.approx(25 * GBIT)
    slow_nvlink = ClusterSpec(machines=4, workers_per_machine=8, nic_gbps=100, nvlink_gbps=40.0)
    assert bus_Bps(slow_nvlink) == pytest.approx(40 * GBIT)
    one = ClusterSpec(machines=1, workers_per_machine=1)
    assert nccl_allreduce_time(one, 1 * MiB) == 0.0


def test_ddp_over_nccl_overlaps_backward_and_serialises_buckets() -> None:
    c = byteps_machine(32)
    grads = (4 * MiB,) * 50  # 200 MiB: 8 buckets of 25 MiB
    calls = 8 * nccl_allreduce_time(c, 25 * MiB)
    # no backward to overlap: compute, then the buckets one after the other
    late = ddp_nccl(Job(grads, compute_s=0.1, backward_fraction=0.0), c)
    assert late.step_s == pytest.approx(0.1 + calls)
    assert late.chunks == 8
    # a long backward hides all but the last bucket
    early = ddp_nccl(Job(grads, compute_s=1.0), c)
    assert early.step_s == pytest.approx(1.0 + nccl_allreduce_time(c, 25 * MiB))
    assert early.bottleneck.startswith("nccl ")
    # the NIC carries what the chosen algorithms put on it
    assert late.nic_bytes["worker"] >= 2 * 255 / 256 * sum(grads) * (1 - 1e-9)
    assert math.isfinite(late.throughput)
