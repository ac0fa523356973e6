"""``make demo`` (autotune.demo): its table's numbers, everywhere; the whole demo on the
emulated cluster with a very short budget, as root."""

from __future__ import annotations

# own world: the demo's own launch on the emulated hosts is what is tested

import argparse
import json
import subprocess
import sys

import pytest
from rich.console import Console

from autotune import demo
import zygote

ALLREDUCE = {"streams": 1, "chunk_bytes": 4 << 20, "transport": "allreduce", "servers": 0,
             "intra": "flat", "compression": "none"}
PUSHPULL = dict(ALLREDUCE, chunk_bytes=1 << 16, transport="pushpull", servers=4)


def test_the_table_compares_ddp_default_kept_and_the_optimum():
    a = argparse.Namespace(model="resnet50/32", workers=4, servers=4, rate="300mbit",
                           fwd_ms=40.0, bwd_ms=120.0, budget=30, db="autotune.db")
    link = {"nbytes": 16 << 20, "samples_s": [0.47, 0.46, 0.48]}
    ddp = {"times_s": [1.2, 1.25, 1.22, 1.3]}
    sess = {"default": ALLREDUCE, "best": PUSHPULL, "default_score": 0.82,
            "default_spread": 0.03, "best_score": 1.15, "best_spread": 0.02, "unit": "it/s",
            "best_iterations": 6, "default_iterations": 6,
            "history": [], "tuning_s": 40.0,
            "kept_times_s": [0.9, 0.88, 0.95, 0.9, 0.92, 0.89]}
    res = demo.summarize(a, link, ddp, sess, 150.0)
    rows = {r["name"]: r for r in res["rows"]}
    assert list(rows) == ["DDP", "autotune, default", "autotune, kept", "analytic optimum"]
    ddp_it = sum(1 / t for t in ddp["times_s"]) / 4
    assert rows["DDP"]["it_per_s"] == pytest.approx(ddp_it)
    # the kept row is training after tuning, not the tuner's (flattering) trial score
    kept_it = sum(1 / t for t in sess["kept_times_s"]) / 6
    assert rows["autotune, kept"]["it_per_s"] == pytest.approx(kept_it)
    assert res["speedup_kept_vs_ddp"]["ratio"] == pytest.approx(kept_it / ddp_it)
    assert res["speedup_kept_vs_ddp"]["best_iterations"] == 6
    assert res["kept_by_session"] == {"it_per_s": 1.15, "spread": 0.02, "iterations": 6}
    assert res["speedup_kept_vs_ddp"]["reference_iterations"] == 4
    # BytePS with k = n: M/B, plus the forward, at each measured B
    B = [(16 << 20) / t for t in link["samples_s"]]
    opt = [1 / (res["gradient_bytes"] / b + 0.04) for b in B]
    assert rows["analytic optimum"]["it_per_s"] == pytest.approx(sum(opt) / 3)
    assert all(r["spread"] > 0 for r in res["rows"])
    out = Console(width=80, record=True, file=open("/dev/null", "w"))
    out.print(demo.table(res))
    text = out.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "pushpull k=4, 1 x 64 KiB" in text
    assert f"{kept_it / ddp_it:.2f}x ± " in text and f"{kept_it:.3f} ± " in text
    assert "DDP 4, default 6, kept 6" in " ".join(text.split())
    assert "x sim." in text
    # the optimum is a formula: its speed-up is marked, with no iteration count
    assert rows["analytic optimum"]["speedup_vs_ddp"]["simulated"] is True


def test_the_table_refuses_a_speed_up_over_too_few_iterations():
    a = argparse.Namespace(model="resnet50/32", workers=4, servers=4, rate="300mbit",
                           fwd_ms=40.0, bwd_ms=120.0, budget=4, db="autotune.db")
    link = {"nbytes": 16 << 20, "samples_s": [0.47]}
    sess = {"default": ALLREDUCE, "best": PUSHPULL, "default_score": 0.82,
            "default_spread": 0.0, "best_score": 1.15, "best_spread": 0.0, "unit": "it/s",
            "best_iterations": 2, "default_iterations": 2, "history": [], "tuning_s": 4.0,
            "kept_times_s": [0.87, 0.9]}
    res = demo.summarize(a, link, {"times_s": [1.2, 1.25, 1.22, 1.3]}, sess, 10.0)
    kept = res["speedup_kept_vs_ddp"]
    assert kept["ratio"] is None and kept["refused"] == "n<4" and kept["best_iterations"] == 2
    out = Console(width=100, record=True, file=open("/dev/null", "w"))
    out.print(demo.table(res))
    assert "– (n<4)" in out.export_text() and "x ± " not in out.export_text()
    # no iteration after tuning: no kept row to compare, and nothing made up
    res = demo.summarize(a, link, {"times_s": [1.2, 1.25, 1.22, 1.3]},
                         dict(sess, kept_times_s=[]), 10.0)
    rows = {r["name"]: r for r in res["rows"]}
    assert rows["autotune, kept"]["it_per_s"] is None
    assert res["speedup_kept_vs_ddp"]["ratio"] is None


@pytest.mark.root
@pytest.mark.slow
def test_the_demo_on_the_emulated_cluster(tmp_path):
    out, db = tmp_path / "demo.json", tmp_path / "demo.db"
    cmd = [sys.executable, "-m", "autotune.demo", "--workers", "2", "--servers", "2",
           "--model", "resnet50/16", "--budget", "6", "--after", "2", "--ddp-iterations",
           "3", "--ddp-warmup", "1", "--link-repeats", "2", "--timeout", "80",
           "--json", str(out), "--db", str(db)]
    proc = zygote.run(cmd, capture_output=True, text=True, timeout=150, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    rows = {r["name"]: r for r in res["rows"]}
    ddp, kept = rows["DDP"]["it_per_s"], rows["autotune, kept"]["it_per_s"]
    assert ddp > 0 and kept > 0 and rows["autotune, default"]["it_per_s"] > 0
    # 3 DDP iterations: too few for a speed-up, so none is headlined (the counts are kept)
    speedup = res["speedup_kept_vs_ddp"]
    assert speedup["ratio"] is None and speedup["refused"] == "n<4", speedup
    assert speedup["reference_iterations"] == 3 and "– (n<4)" in proc.stdout
    assert rows["analytic optimum"]["it_per_s"] > 0 and res["B_bytes_per_s"] > 1e6
    assert len(res["trials"]) >= 2
    for name in rows:
        assert name in proc.stdout
    assert "vs DDP" in proc.stdout
    runs = zygote.run([sys.executable, "-m", "autotune.cli", "db", "runs", "--json",
                           "--db", str(db)], capture_output=True, text=True, timeout=60)
    assert runs.returncode == 0, runs.stderr
    stored = json.loads(runs.stdout)
    assert len(stored) == 1 and stored[0]["job"] == "demo-resnet50/16"
    assert stored[0]["status"] == "finished"


def test_without_the_emulator_it_says_why_and_runs_the_loopback_session(monkeypatch, capsys):
    import autotune.emulate
    import autotune.launch

    calls = []
    monkeypatch.setattr(autotune.emulate, "unavailable_reason", lambda: "needs root (euid 1000)")
    monkeypatch.setattr(autotune.launch, "run_job",
                        lambda script, **kw: calls.append((script, kw)) or 0)
    with pytest.raises(SystemExit) as done:
        demo.main([])
    assert done.value.code == 0
    err = capsys.readouterr().err
    assert "not available here" in err and "needs root (euid 1000)" in err
    (script, kw), = calls
    assert script[0].endswith("examples/train_transformer.py") and kw == {
        "workers": 4, "servers": 2, "machines": 2}
