"""Worker process for tests/probes/test_probes_cluster.py: runs probe_cluster configurations.

``python tests/probes_helpers.py RANK WORLD INIT_FILE OUTDIR CONFIGS`` joins a gloo world
through a file store, runs each named configuration (comma-separated) in that one process
group and writes ``OUTDIR/<config>.<rank>.json`` with the graph (node-link) or the error.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch.distributed as dist  # noqa: E402

from autotune.probes.cluster import probe_cluster  # noqa: E402
from autotune.probes.graph import to_json  # noqa: E402

FAST = dict(min_bytes=256 << 10, max_bytes=8 << 20, min_transfer_s=0.005, repeats=3)


def run_config(name: str, rank: int) -> dict:
    if name == "env":  # machines from AUTOTUNE_MACHINE, one rank each
        return {"budget": 1.5, "graph": probe_cluster(time_budget_s=1.5, **FAST)}
    if name == "two":  # ranks 0 and 1 share a machine; rank 1 is not a leader
        machine = "büro-a" if rank < 2 else "b"
        gpus = {0: 4, 1: 2, 2: 0}[rank]
        return {"budget": 1.0,
                "graph": probe_cluster(machine=machine, n_gpus=gpus, time_budget_s=1.0, **FAST)}
    if name == "one":  # everyone on one machine: no edges, nothing measured
        return {"budget": 1.0, "graph": probe_cluster(machine="solo", time_budget_s=1.0, **FAST)}
    if name == "badname":  # rank 2's name is too long: every rank must fail, none hang
        machine = "x" * 300 if rank == 2 else f"ok{rank}"
        return {"budget": 1.0, "graph": probe_cluster(machine=machine, time_budget_s=1.0, **FAST)}
    if name == "shaped":  # under tc shaping (root test): bigger transfers, longer budget
        return {"budget": 6.0, "graph": probe_cluster(
            time_budget_s=6.0, min_bytes=64 << 10, max_bytes=4 << 20, min_transfer_s=0.2,
            repeats=3)}
    raise ValueError(f"unknown config {name}")


def main() -> None:
    rank, world = int(sys.argv[1]), int(sys.argv[2])
    init_file, out = sys.argv[3], Path(sys.argv[4])
    configs = sys.argv[5].split(",")
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        for name in configs:
            t0 = time.perf_counter()
            try:
                res = run_config(name, rank)
                record = {"graph": to_json(res["graph"]), "budget": res["budget"]}
            except Exception as exc:  # noqa: BLE001 - reported to the test
                record = {"error": f"{type(exc).__name__}: {exc}",
                          "trace": traceback.format_exc()}
            record["elapsed"] = time.perf_counter() - t0
            (out / f"{name}.{rank}.json").write_text(json.dumps(record))
            dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
