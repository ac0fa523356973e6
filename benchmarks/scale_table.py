"""Scale on paper (issue 20): what the tuner would pick from 16 to 1024 GPUs, on the simulator.

For every cell of (GPUs, model, NIC rate, servers, per-flow cap) the Tuner tunes offline
against :class:`autotune.sim.SimulatedObjective` (``autotune.offline.simulated.tune_simulated``:
the session's trial ledger, the simulator as its physics prior, 3% noise, a throw-away
database), and the row gives the configuration it keeps and its predicted speed-up over
DDP on NCCL (:func:`autotune.sim.nccl.ddp_nccl`: 25 MiB buckets overlapping backward, each
all-reduced by the ring or tree and protocol NCCL's cost model picks for its size) on the
same cluster, and (column "vs flat ring") over the earlier DDP-like baseline, one ring
through every GPU (``autotune.offline.simulated.DDP_LIKE`` under
:func:`autotune.sim.simulate`, this project's runtime's ring); all noise-free. The check is the BytePS paper's (OSDI 2020, §7.4) 256-GPU
figures: 1.10-1.84x all-reduce with k = n CPU machines, 1.09-1.53x without, ResNet-50
97.5% vs 88% scaling efficiency (~1.11x); 32 machines of 8 V100 with NVLink, 100 Gbit/s.

ClusterSpec: 8 GPUs per machine (2 per PCIe switch, NVLink between pairs, the NIC under switch
0: BytePS's Fig. 6b machine), ``--nics`` Gbit/s NICs, servers k = n (as BytePS) or none,
per-flow cap none or a quarter of the NIC. Compute per iteration (forward + backward on one
V100, the backward 2/3 of it) is an assumption per model (``COMPUTE_MS``).

    .venv/bin/python benchmarks/scale_table.py --models resnet50         # ~4 min on 2 cores
    .venv/bin/python benchmarks/scale_table.py --gpus 256 --nics 100 --caps none   # BytePS's cells
    .venv/bin/python benchmarks/scale_table.py                  # all 96 cells: well over an hour

The JSON is rewritten after every cell, so an interrupted run keeps what it did. The
big models are slow to tune: GPT-2 XL is 6.2 GB of gradients, ~95,000 chunks of 64 KiB,
and the tuner's prior simulates many candidates per trial (one GPT-2 XL cell at 1024
GPUs: ~100 s at budget 100).

Writes ``benchmarks/results/scale_table.json`` and prints a table (``--markdown`` for
RESULTS.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
MiB = 1 << 20

#: forward + backward of one iteration on one V100 (ms) and samples per GPU: assumptions
#: of the order of the BytePS paper's setups (ResNet-50 batch 64 images, BERT-large
#: 8 sequences of 512 tokens... rounded), not measurements
COMPUTE_MS = {"resnet50": (200.0, 64), "bert-large": (450.0, 8), "gpt2-xl": (1200.0, 4)}

#: BytePS (OSDI 2020) §7.4, 256 GPUs, 100 Gbit/s RDMA, vs Horovod/NCCL all-reduce
BYTEPS_256 = {
    "with servers (k = n)": "1.10-1.84x (all six models); ResNet-50 ~1.11x (97.5% vs 88% scaling efficiency)",
    "no servers": "1.09-1.53x (all six models)",
}


def describe(cfg: dict[str, Any]) -> str:
    kib = cfg["chunk_bytes"] // 1024
    size = f"{kib // 1024} MiB" if kib >= 1024 else f"{kib} KiB"
    t = "pp k={}".format(cfg["servers"]) if cfg["transport"] == "pushpull" else "ar"
    extra = f" {cfg['intra']}" if cfg.get("intra", "flat") != "flat" else " flat"
    if cfg.get("intra") == "root":
        extra += f"@{cfg['reduce_root']}"
    comp = cfg.get("compression", "none")
    return f"{t}{extra}, {cfg['streams']}x{size}" + ("" if comp == "none" else f", {comp}")


def cell(model: str, gpus: int, nic: float, servers: bool, capped: bool, budget: int,
         seed: int, db: str) -> dict[str, Any]:
    from autotune.offline.simulated import DDP_LIKE, tune_simulated
    from autotune.sim import ClusterSpec, Job, simulate
    from autotune.sim.nccl import ddp_nccl

    n = gpus // 8
    cluster = ClusterSpec(machines=n, workers_per_machine=8, nic_gbps=nic,
                      per_flow_gbps=nic / 4 if capped else None,
                      server_machines=n if servers else 0, gpus_per_switch=2, nic_switch=0,
                      nvlink_gbps=200.0, name=f"{n}x8 {nic:g}G")
    compute_ms, batch = COMPUTE_MS[model]
    t0 = time.perf_counter()
    rep = tune_simulated(model, cluster, budget=budget, db=db, compute_ms=compute_ms,
                         batch_per_worker=batch, seed=seed)
    tune_s = time.perf_counter() - t0
    job = Job.from_model(model, compute_ms=compute_ms, batch_per_worker=batch)
    best = simulate(job, cluster, rep["best"])
    ddp = ddp_nccl(job, cluster)
    ring = simulate(job, cluster, DDP_LIKE)
    return {
        "model": model, "gpus": gpus, "machines": n, "nic_gbps": nic,
        "servers": n if servers else 0, "per_flow_gbps": nic / 4 if capped else None,
        "compute_ms": compute_ms, "gradient_mib": job.total_bytes / MiB,
        "best": rep["best"], "best_step_s": best.step_s, "best_bottleneck": best.bottleneck,
        "ddp_step_s": ddp.step_s, "ddp_bottleneck": ddp.bottleneck,
        "ddp_calls": {k[6:]: int(v) for k, v in ddp.breakdown.items() if k.startswith("calls_")},
        "speedup": ddp.step_s / best.step_s,
        "flat_ring_step_s": ring.step_s, "speedup_vs_flat_ring": ring.step_s / best.step_s,
        "trials": len(rep["trials"]),
        "budget": budget, "tune_s": tune_s,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="16,64,256,1024")
    ap.add_argument("--models", default="resnet50,bert-large,gpt2-xl")
    ap.add_argument("--nics", default="25,100", help="NIC rates, Gbit/s")
    ap.add_argument("--servers", choices=("both", "none", "k=n"), default="both",
                    help="server machines: none, k = n, or both rows")
    ap.add_argument("--caps", choices=("both", "none", "quarter"), default="both",
                    help="per-flow cap: none, a quarter of the NIC, or both rows")
    ap.add_argument("--budget", type=int, default=30,
                    help="tuning iterations per cell (30: 100 is too slow on 2 cores for the "
                         "big models' many small chunks)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=RESULTS / "scale_table.json")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown too")
    a = ap.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    con = Console(stderr=True)
    rows = []
    grid = list(itertools.product(a.models.split(","), [int(g) for g in a.gpus.split(",")],
                                  [float(x) for x in a.nics.split(",")],
                                  {"both": (False, True), "none": (False,), "k=n": (True,)}[a.servers],
                                  {"both": (False, True), "none": (False,), "quarter": (True,)}[a.caps]))
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i, (model, gpus, nic, servers, capped) in enumerate(grid):
            # a fresh database per cell: no warm start from the other cells
            db = os.path.join(tmp, f"cell{i}.db")
            r = cell(model, gpus, nic, servers, capped, a.budget, a.seed, db)
            rows.append(r)
            a.json.parent.mkdir(parents=True, exist_ok=True)
            a.json.write_text(json.dumps({"benchmark": "scale_table", "partial": True,
                                          "budget": a.budget, "rows": rows}, indent=2))
            con.print(f"[{i + 1}/{len(grid)}] {model} {gpus} GPUs {nic:g}G "
                      f"{'k=n' if servers else 'k=0'} {'cap' if capped else ''}: "
                      f"{describe(r['best'])} {r['speedup']:.2f}x vs NCCL, "
                      f"{r['speedup_vs_flat_ring']:.2f}x vs flat ring ({r['tune_s']:.1f} s)")
    total_s = time.perf_counter() - t_all
    t = Table(title=f"Scale on paper: tuned (budget {a.budget}) vs DDP on NCCL, predicted by autotune.sim")
    right = ("GPUs", "step", "DDP-NCCL step", "speed-up", "vs flat ring")
    for col in ("model", "GPUs", "NIC", "servers", "flow cap", "configuration kept",
                "step", "DDP-NCCL step", "speed-up", "vs flat ring"):
        t.add_column(col, justify="right" if col in right else "left")
    for r in rows:
        t.add_row(r["model"], str(r["gpus"]), f"{r['nic_gbps']:g}G",
                  f"k={r['servers']}", f"{r['per_flow_gbps']:g}G" if r["per_flow_gbps"] else "-",
                  describe(r["best"]), f"{r['best_step_s'] * 1e3:.0f} ms",
                  f"{r['ddp_step_s'] * 1e3:.0f} ms", f"{r['speedup']:.2f}x",
                  f"{r['speedup_vs_flat_ring']:.2f}x")
    Console(width=160).print(t)
    print("BytePS (OSDI 2020, §7.4), 256 GPUs, 100 Gbit/s, vs all-reduce: "
          + "; ".join(f"{k}: {v}" for k, v in BYTEPS_256.items()))
    print(f"{len(rows)} cells in {total_s:.0f} s")
    out = {"benchmark": "scale_table", "command": "benchmarks/scale_table.py " + " ".join(sys.argv[1:]),
           "budget": a.budget, "seed": a.seed, "compute_ms": COMPUTE_MS, "byteps_256": BYTEPS_256,
           "total_s": total_s, "time": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(out, indent=2))
    print(f"wrote {a.json}")
    if a.markdown:
        print("\n| model | GPUs | NIC | servers | flow cap | configuration kept | step | DDP-NCCL step "
              "| speed-up | vs flat ring |")
        print("| --- | ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: |")
        for r in rows:
            print(f"| {r['model']} | {r['gpus']} | {r['nic_gbps']:g}G | k={r['servers']} | "
                  f"{(str(round(r['per_flow_gbps'], 2)) + 'G') if r['per_flow_gbps'] else '-'} | "
                  f"{describe(r['best'])} | {r['best_step_s'] * 1e3:.0f} ms | "
                  f"{r['ddp_step_s'] * 1e3:.0f} ms | **{r['speedup']:.2f}x** | "
                  f"{r['speedup_vs_flat_ring']:.2f}x |")


if __name__ == "__main__":
    main()
