"""What leaving a codec does to the model: the residual at a switch to lossless (issue 62).

Error feedback keeps what a codec dropped and adds it to the next gradient it encodes. At
a switch from a codec to a lossless configuration that residual is still there: several
steps' worth of most of the gradient under top-k 0.1%. Added to one step's gradient
whole, it floods the optimiser (Adam's moments, SGD's momentum) for hundreds of steps.

This benchmark trains, in one process, the two held-out-like jobs of
``benchmarks/userclock/tasks.py`` (a small GPT-2 with AdamW on the standard library's sources;
a CNN with SGD and momentum on scikit-learn's digits), ``--steps`` steps, the gradient
compressed by the real ``topk`` codec with the real :class:`~autotune.runtime.codecs.
feedback.ErrorFeedback` from ``--lossy-from`` to ``--lossy-to``, then lossless, under
each rule for the residual at the switch:

* ``never``: no codec at all (the reference);
* ``flush``: the whole residual added to the first lossless step (the old runtime);
* ``drop``: the residual forgotten;
* ``bound``: the residual added with its norm at most the gradient's own (per chunk),
  the rest forgotten;
* ``runtime``: what :class:`ErrorFeedback` does itself when a chunk goes lossless
  (``ErrorFeedback.encode`` with the ``none`` codec): the rule the runtime uses.

One chunk holds the whole gradient (the default 4 MiB chunk holds either model). The
validation loss is read every ``--every`` steps; the table gives, per job and rule, the
median over ``--seeds`` seeds of the final validation loss and its excess over
``never``, and the worst excess over the steps after the switch. JSON to
``benchmarks/results/residual_bench.json``::

    .venv/bin/python benchmarks/residual_bench.py                 # ~6 min on 2 cores
    .venv/bin/python benchmarks/residual_bench.py --models cnn --seeds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import RESULTS, machine, save  # noqa: E402

OUT = RESULTS / "residual_bench.json"
RULES = ("never", "flush", "drop", "bound", "runtime")


def train(model: str, rule: str, seed: int, a: argparse.Namespace) -> list[tuple[int, float]]:
    """One run: the validation loss every ``a.every`` steps, ``(step, loss)``."""
    import torch

    from autotune.runtime.codecs.feedback import ErrorFeedback, whole
    from autotune.runtime.codecs.registry import make_codec
    from userclock.tasks import TASKS

    torch.set_num_threads(1)
    task = TASKS[model](seed, 0, 1, a.batch)
    params = [p for p in task.model.parameters() if p.requires_grad]
    opt = task.optimizer()
    n = sum(p.numel() for p in params)
    ef, topk, none = ErrorFeedback(n), make_codec("topk", ratio=a.ratio), make_codec("none")
    chunk = whole(0, n)
    curve = []
    for step in range(a.steps):
        x, y = task.next_batch()
        opt.zero_grad(set_to_none=False)
        task.loss(task.model, x, y).backward()
        g = torch.cat([p.grad.reshape(-1) for p in params])
        if rule != "never" and a.lossy_from <= step < a.lossy_to:
            sent = topk.decode(ef.encode(topk, g, chunk), n)
        elif rule != "never" and step == a.lossy_to:  # the switch to lossless
            r = ef.residual(chunk)
            if rule == "flush":
                sent = g + r
            elif rule == "drop":
                sent = g
            elif rule == "bound":
                sent = g + r * min(1.0, float(g.norm()) / max(float(r.norm()), 1e-30))
            else:  # runtime
                sent = none.decode(ef.encode(none, g, chunk), n)
            ef.clear()
        else:
            sent = g
        pos = 0
        for p in params:
            k = p.numel()
            p.grad.copy_(sent[pos:pos + k].view_as(p))
            pos += k
        opt.step()
        if (step + 1) % a.every == 0 or step + 1 == a.steps:
            curve.append((step + 1, task.val_loss()))
    return curve


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt,cnn")
    ap.add_argument("--rules", default=",".join(RULES))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--lossy-from", type=int, default=100)
    ap.add_argument("--lossy-to", type=int, default=160)
    ap.add_argument("--ratio", type=float, default=0.001, help="top-k's kept fraction")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--json", "--out", dest="out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    models, rules = a.models.split(","), a.rules.split(",")
    bad = [m for m in models if m not in ("gpt", "cnn")] + [r for r in rules if r not in RULES]
    if bad or "never" not in rules or not 0 <= a.lossy_from < a.lossy_to < a.steps:
        ap.error(f"unknown models/rules {bad}, or no 'never', or not 0 <= --lossy-from < "
                 "--lossy-to < --steps")
    runs: dict[str, dict[str, list[list[tuple[int, float]]]]] = {}
    for model in models:
        for seed in range(a.seeds):
            for rule in rules:
                t0 = time.perf_counter()
                curve = train(model, rule, seed, a)
                runs.setdefault(model, {}).setdefault(rule, []).append(curve)
                print(f"{model} seed {seed} {rule:8s} final {curve[-1][1]:.4f} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
    table: dict[str, dict[str, dict[str, float]]] = {}
    for model, by_rule in runs.items():
        ref = by_rule["never"]
        for rule, curves in by_rule.items():
            final = [c[-1][1] for c in curves]
            excess = [c[-1][1] / r[-1][1] - 1 for c, r in zip(curves, ref)]
            worst = [max(v / rv - 1 for (s, v), (_, rv) in zip(c, r) if s > a.lossy_to)
                     for c, r in zip(curves, ref)]
            table.setdefault(model, {})[rule] = {
                "final": statistics.median(final), "final_min": min(final),
                "final_max": max(final), "excess": statistics.median(excess),
                "worst_after_switch": statistics.median(worst)}
    print(f"\nmedian of {a.seeds} seeds; excess: over 'never' (no codec), final and worst "
          f"after the switch at step {a.lossy_to}")
    print(f"{'job':5s} {'rule':8s} {'final loss':>22s} {'excess':>8s} {'worst':>8s}")
    for model, by_rule in table.items():
        for rule, t in by_rule.items():
            print(f"{model:5s} {rule:8s} {t['final']:8.4f} ({t['final_min']:.4f}-"
                  f"{t['final_max']:.4f}) {t['excess']:+8.2%} {t['worst_after_switch']:+8.2%}")
    res: dict[str, Any] = {"args": {k: str(v) for k, v in vars(a).items()},
                           "table": table, "curves": runs, "machine": machine()}
    save(res, a.out)
    print(f"JSON: {a.out}")


if __name__ == "__main__":
    main()
