"""A 2-worker job for tests/session/test_goodput.py (issue 39): a case of the shared
2-rank world there (``job``), and ``python goodput_worker.py native|ddp goodput|throughput
OUT_DIR [DEVICE]`` under ``autotune launch --workers 2`` for scripts/gpu_check.sh
(DEVICE: ``cpu``, or ``cuda``). It trains
scikit-learn's digits classifier (SGD with momentum) under ``allow_lossy`` with the space
narrowed to lossless or random-k at 5 % (a codec with a large error) and writes every
trial the leader saw (returned by ``job``; the script writes it to OUT_DIR/result.json)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import autotune

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from digits import classifier, digits  # noqa: E402

FIXED = {"compression": ["none", "randomk"], "randomk_ratio": 0.05,
         "compress_min_bytes": 64 << 10, "chunk_bytes": 4 << 20, "streams": [1, 2],
         "intra": "flat"}  # (on one machine, intra=root compresses nothing)


def job(kind: str, score: str, out: str, device: str = "cpu") -> dict | None:
    """Train under a session in this process's world (made here where there is none); what
    the leader saw (``None`` on the other ranks)."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    out = Path(out)
    model: torch.nn.Module = classifier().to(device)
    if kind == "ddp":
        if not dist.is_initialized():
            dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = digits()
    gen = torch.Generator().manual_seed(int(os.environ["RANK"]))  # a batch of its own
    with autotune.session(model, budget=40, db=out / "goodput.db", allow_lossy=True,
                          lossy_score=score, prior=False, fixed=FIXED, samples_per_step=32,
                          verbose=False, job=f"goodput-{kind}-{score}", spend=None) as session:
        for _ in range(90):
            idx = torch.randint(len(data), (32,), generator=gen)
            x, y = data.tensors[0][idx].to(device), data.tensors[1][idx].to(device)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            session.step()
            opt.step()
            opt.zero_grad()
    if not session.is_leader:
        return None
    trials = [{"config": r.config, "score": r.score, "error": r.error,
               "iterations": r.iterations, "throughput": r.throughput,
               "efficiency": r.efficiency} for r in session.history]
    return {"trials": trials, "best": session.best, "db": str(out / "goodput.db"),
            "noise_scale": session.meter.probe.noise_scale if session.meter.probe is not None else None}


def main() -> None:
    out = Path(sys.argv[3])
    seen = job(sys.argv[1], sys.argv[2], str(out), sys.argv[4] if len(sys.argv) > 4 else "cpu")
    if seen is not None:
        (out / "result.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main()
