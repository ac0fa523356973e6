"""One plan: the simulator's chunks, streams, owners and ready times are the runtime's.

The simulator used to pack gradients its own way (a gradient of ``chunk_bytes`` or more
closed the open chunk and was split on its own), so it predicted chunks that never ran:
for 3 MiB, 100 KiB, 5 MiB and 200 KiB at 4 MiB it scheduled [3.1 MiB, 4 MiB, 1 MiB,
200 KiB] where the runtime sends [4 MiB, 4 MiB, 300 KiB].
"""

from __future__ import annotations

import random
import subprocess
import sys
from itertools import accumulate

import pytest

from autotune.runtime.control.world import WorldInfo
from autotune.runtime.data.plan import DTYPE_BYTES, coalesces, make_plan
from autotune.sim import ClusterSpec, Job, simulate
import zygote

KiB = 1 << 10
MiB = 1 << 20

EXAMPLE = (3 * MiB, 100 * KiB, 5 * MiB, 200 * KiB)


def world(machines: int, per_machine: int, servers: int) -> WorldInfo:
    """A job's world as the runtime sees it: ``machines`` x ``per_machine`` workers, then
    ``servers`` server ranks, one machine each."""
    roles = ("worker",) * (machines * per_machine) + ("server",) * servers
    names = tuple(f"m{i // per_machine}" for i in range(machines * per_machine)) + tuple(
        f"s{j}" for j in range(servers))
    return WorldInfo(0, len(roles), roles, names)


def cfg(**kw: object) -> dict:
    base = {"streams": 1, "chunk_bytes": 4 * MiB, "transport": "allreduce", "servers": 0,
            "intra": "flat", "reduce_root": 0, "compression": "none"}
    return {**base, **kw}


def runtime_view(grads: tuple[int, ...], sizes: list, config: dict, info: WorldInfo) -> list[tuple]:
    """(bytes, stream, owner index, ready share) of each chunk of the runtime's plan for
    gradients of ``grads`` bytes held as ``sizes`` (``(numel, dtype)``, ready order).

    Owner indices follow the simulator's order (the configuration's servers, then each
    worker machine's Summation Service); ready: the share of the bytes produced once the
    chunk's last gradient is in."""
    k = int(config["servers"])
    index = {r: i for i, r in enumerate(list(info.servers[:k]) + list(info.summation_hosts))}
    done = list(accumulate(grads))
    return [(c.nbytes, c.stream, None if c.owner is None else index[c.owner],
             done[c.tensors[-1]] / done[-1]) for c in make_plan(sizes, config, info)]


def sim_view(job: Job, config: dict, machines: int) -> list[tuple]:
    """The same, from the simulator's plan (:meth:`Job.plan`)."""
    p = job.plan(config, machines)
    owners = p.owners or [None] * len(p.sizes)
    return list(zip(p.sizes, p.streams, owners, p.ready))


def test_the_issue_example() -> None:
    job = Job(EXAMPLE)
    sizes, ready = job.chunks(4 * MiB)
    assert sizes == [4 * MiB, 4 * MiB, 300 * KiB]  # not [3.1 MiB, 4 MiB, 1 MiB, 200 KiB]
    assert [c.nbytes for c in make_plan([b // 4 for b in EXAMPLE], cfg(), world(2, 1, 0))] == sizes
    # ready: chunk 0 holds the 3 MiB, the 100 KiB and the head of the 5 MiB gradient
    total = sum(EXAMPLE)
    assert ready == [(8 * MiB + 100 * KiB) / total] * 2 + [1.0]


def _ragged(seed: int, n: int) -> tuple[int, ...]:
    rng = random.Random(seed)
    return tuple(4 * rng.choice([1, 17, 1000, 60_000, 262_144, 1_500_000]) + 4 * rng.randint(0, 999)
                 for _ in range(n))


# (gradients, configuration, worker machines, workers per machine, servers launched)
LAYOUTS = [
    pytest.param(EXAMPLE, cfg(), 2, 1, 0, id="example-allreduce"),
    pytest.param(EXAMPLE, cfg(transport="pushpull", servers=1, streams=2, chunk_bytes=MiB),
                 3, 1, 1, id="example-pushpull-k1"),
    pytest.param(_ragged(0, 160), cfg(streams=4, chunk_bytes=256 * KiB), 4, 2, 0,
                 id="ragged-allreduce-4-streams"),
    pytest.param(_ragged(1, 160), cfg(transport="pushpull", servers=2, streams=3,
                                      chunk_bytes=256 * KiB), 4, 2, 3,
                 id="ragged-pushpull-k2-of-3"),
    pytest.param(_ragged(2, 90), cfg(transport="pushpull", servers=0, streams=5,
                                     chunk_bytes=64 * KiB), 3, 1, 0, id="ragged-pushpull-k0"),
    pytest.param(_ragged(3, 90), cfg(transport="pushpull", servers=3, streams=2,
                                     chunk_bytes=MiB), 2, 1, 3, id="ragged-pushpull-k-ge-n"),
    pytest.param(_ragged(4, 50), cfg(transport="pushpull", servers=1, streams=2,
                                     chunk_bytes=512 * KiB), 1, 4, 1,
                 id="one-machine-pushpull-k1"),
    pytest.param(_ragged(5, 300), cfg(transport="pushpull", servers=16, streams=8,
                                      chunk_bytes=64 * KiB), 64, 1, 16,
                 id="pushpull-64-machines-k16"),
]


@pytest.mark.parametrize("grads,config,machines,per_machine,launched", LAYOUTS)
def test_simulator_plans_the_runtime_chunks(grads: tuple[int, ...], config: dict, machines: int,
                                            per_machine: int, launched: int) -> None:
    job = Job(grads)
    info = world(machines, per_machine, launched)
    want = runtime_view(grads, [(b // 4, "float32") for b in grads], config, info)
    coalesced = config["streams"] if coalesces(config) else 0
    assert job.chunks(config["chunk_bytes"], coalesced)[0] == [w[0] for w in want]
    assert sim_view(job, config, machines) == want
    # the simulator's bytes-as-uint8 gradients cut as float32 ones do
    assert runtime_view(grads, job.sizes, config, info) == want
    # and it schedules exactly those chunks
    cluster = ClusterSpec(machines=machines, workers_per_machine=per_machine, server_machines=launched)
    assert simulate(job, cluster, config).chunks == len(want)


def test_mixed_dtypes_close_chunks_as_in_the_runtime() -> None:
    rng = random.Random(7)
    dtypes = tuple(rng.choice(["float32", "float16", "bfloat16", "float32"]) for _ in range(120))
    grads = tuple(DTYPE_BYTES[d] * rng.choice([3, 5000, 90_000, 400_000]) for d in dtypes)
    job = Job(grads, dtypes=dtypes)
    config = cfg(transport="pushpull", servers=1, streams=3, chunk_bytes=128 * KiB)
    info = world(3, 2, 1)
    got = sim_view(job, config, 3)
    assert got == runtime_view(grads, [(b // DTYPE_BYTES[d], d) for b, d in zip(grads, dtypes)],
                               config, info)
    # a dtype change closes a chunk: more chunks than one dtype would give
    assert len(got) > len(Job(grads).chunks(128 * KiB)[0])
    with pytest.raises(ValueError, match="not a whole number of float32"):
        Job((6,), dtypes=("float32",))
    with pytest.raises(ValueError, match="unsupported dtype"):
        Job((8,), dtypes=("complex64",))


def test_ready_times_follow_the_runtime_chunks() -> None:
    """With compute to overlap, a chunk leaves when backward has produced its last
    gradient: the example's first chunk waits for the head of the 5 MiB gradient, i.e.
    for the whole 5 MiB gradient, so only the 300 KiB tail chunk is left after backward."""
    job = Job(EXAMPLE, compute_s=3.0, backward_fraction=1.0)
    cluster = ClusterSpec(machines=2, nic_gbps=100, latency_us=0, chunk_overhead_us=0,
                      per_flow_gbps=None, cpu_sum_gbps=None, worker_device="cpu")
    est = simulate(job, cluster, cfg())
    total = sum(EXAMPLE)
    last_ready = 3.0 * (8 * MiB + 100 * KiB) / total  # chunks 0 and 1
    per_byte = 2 * (2 - 1) / 2 / (100e9 / 8)           # ring all-reduce of 2 at 100 Gbit/s
    # chunks 0 and 1 back to back from last_ready (one stream), then the tail when backward ends
    expected = max(last_ready + 8 * MiB * per_byte, 3.0) + 300 * KiB * per_byte
    assert est.step_s == pytest.approx(expected, rel=1e-9)


def test_importing_the_simulator_does_not_import_torch() -> None:
    code = ("import sys, autotune.sim, autotune.runtime.data.plan; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert zygote.run([sys.executable, "-c", code]).returncode == 0
