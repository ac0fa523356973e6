"""Does the loss test predict whether a codec reaches the loss sooner? (issue 62)

A session keeps a codec only if its loss test (:mod:`autotune.schedule.loss_test`) finds
the loss falling faster per second under it than under lossless. This benchmark asks
whether that verdict predicts the outcome, on the two held-out-like jobs of
``benchmarks/userclock/tasks.py`` (a small GPT-2 with AdamW on the standard library's
sources; a CNN with SGD and momentum on scikit-learn's digits), in one process, with the
real codecs and the real :class:`~autotune.runtime.codecs.feedback.ErrorFeedback` (and its
bounded fold when a chunk leaves its codec, as the runtime does).

The clock is a model, so that the communication's share of a step can be set: a lossless
step takes 1 s, of which ``share`` is communication; a codec's step takes ``1 - share +
share x r``, where ``r`` is its payload's bytes over the float32 chunk's
(``payload_nbytes``). For each job and seed, the model trains ``--start`` lossless steps
(the sensitive phase), and from that snapshot, for each codec and share:

* **the loss test** runs as a session runs it (blocks of 8, codec first, the losses of
  the training batches): its verdict, and how many iterations it took;
* **the outcome**: from the same snapshot, codec-only and lossless-only training for
  ``--seconds`` of the model clock, on the same batches; the codec "wins" when its
  validation loss there (the mean of the readings at 0.8, 0.9 and 1.0 of the clock) is
  lower;
* **the session**: the loss test, then its verdict's configuration to ``--seconds``: its
  validation loss against lossless-only (the cost of the test included).

The table gives, per job, codec and share, how often the verdict matched the outcome,
and the session's median excess over lossless. JSON to
``benchmarks/results/loss_test_bench.json``::

    .venv/bin/python benchmarks/loss_test_bench.py                  # ~25 min on 2 cores
    .venv/bin/python benchmarks/loss_test_bench.py --models cnn --seeds 3
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import RESULTS, machine, save  # noqa: E402

OUT = RESULTS / "loss_test_bench.json"
CODECS = {"topk0.1%": ("topk", {"ratio": 0.001}), "topk1%": ("topk", {"ratio": 0.01}),
          "fp16": ("fp16", {})}


class Job:
    """One job from a snapshot: its model, optimiser, flat gradient and the codecs."""

    def __init__(self, model: str, seed: int, batch: int) -> None:
        import torch

        from userclock.tasks import TASKS

        torch.manual_seed(seed)
        self.task = TASKS[model](seed, 0, 1, batch)
        self.params = [p for p in self.task.model.parameters() if p.requires_grad]
        self.opt = self.task.optimizer()
        self.n = sum(p.numel() for p in self.params)

    def snapshot(self) -> tuple[dict, dict, dict]:
        """The model, the optimiser and the batches to come (every run from a snapshot
        sees the same ones)."""
        data = {"gen": self.task.gen.get_state(), "perm": getattr(self.task, "perm", None),
                "pos": getattr(self.task, "pos", None)}
        return (copy.deepcopy(self.task.model.state_dict()),
                copy.deepcopy(self.opt.state_dict()), copy.deepcopy(data))

    def restore(self, snap: tuple[dict, dict, dict]) -> None:
        self.task.model.load_state_dict(snap[0])
        self.opt.load_state_dict(snap[1])
        data = copy.deepcopy(snap[2])
        self.task.gen.set_state(data.pop("gen"))
        for name, value in data.items():
            if value is not None:
                setattr(self.task, name, value)

    def step(self, codec: Any, ef: Any) -> float:
        """One training step, the gradient sent through ``codec`` (None: lossless, with
        error feedback's residual folded back bounded, as the runtime does); the batch's
        loss before the step."""
        import torch

        from autotune.runtime.codecs.feedback import whole
        from autotune.runtime.codecs.registry import make_codec

        x, y = self.task.next_batch()
        self.opt.zero_grad(set_to_none=False)
        loss = self.task.loss(self.task.model, x, y)
        loss.backward()
        g = torch.cat([p.grad.reshape(-1) for p in self.params])
        use = codec if codec is not None else make_codec("none")
        sent = use.decode(ef.encode(use, g, whole(0, self.n)), self.n)
        pos = 0
        for p in self.params:
            p.grad.copy_(sent[pos:pos + p.numel()].view_as(p))
            pos += p.numel()
        self.opt.step()
        return float(loss.detach())


def one(job: Job, snap: tuple, codec_name: str, share: float, seconds: float,
        mode: str) -> dict[str, Any]:
    """From ``snap``: ``mode`` ``test`` (the loss test, then its verdict to ``seconds``),
    ``codec`` or ``lossless`` (that alone to ``seconds``)."""
    from autotune.runtime.codecs.feedback import ErrorFeedback
    from autotune.runtime.codecs.registry import make_codec
    from autotune.schedule.loss_test import LossTest

    job.restore(snap)
    kind, params = CODECS[codec_name]
    codec = make_codec(kind, **params)
    ratio = codec.payload_nbytes(job.n) / (4 * job.n)
    step_s = {True: 1 - share + share * ratio, False: 1.0}
    ef = ErrorFeedback(job.n)
    test = LossTest({"c": codec_name}, {"c": "none"}) if mode == "test" else None
    verdict, clock, steps, vals = None, 0.0, 0, []
    use_codec = mode == "codec"
    marks = [f * seconds for f in (0.8, 0.9)]  # and the end: the outcome is their mean
    while clock < seconds:
        if marks and clock >= marks[0]:
            marks.pop(0)
            vals.append(job.task.val_loss())
        if test is not None and verdict is None:
            use_codec = test.config()["c"] != "none"
        loss = job.step(codec if use_codec else None, ef)
        clock, steps = clock + step_s[use_codec], steps + 1
        if test is not None and verdict is None:
            verdict = test.ran(test.codec if use_codec else test.lossless, step_s[use_codec],
                               loss)
            if verdict is not None:
                use_codec = verdict.keep
    vals.append(job.task.val_loss())
    out = {"val": statistics.mean(vals), "steps": steps, "ratio": ratio}
    if test is not None:
        out.update(keep=None if verdict is None else verdict.keep, test_iterations=test.count,
                   line=None if verdict is None else verdict.line)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt,cnn")
    ap.add_argument("--codecs", default=",".join(CODECS))
    ap.add_argument("--shares", default="0.3,0.7", help="communication's share of a step")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--start", type=int, default=100, help="lossless steps first")
    ap.add_argument("--seconds", type=float, default=100.0, help="model clock after them")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--json", "--out", dest="out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    models, codecs = a.models.split(","), a.codecs.split(",")
    shares = [float(s) for s in a.shares.split(",")]
    bad = [m for m in models if m not in ("gpt", "cnn")] + [c for c in codecs if c not in CODECS]
    if bad or not all(0 <= s < 1 for s in shares) or a.seconds <= 0:
        ap.error(f"unknown models/codecs {bad}, or a share outside [0, 1), or --seconds <= 0")
    import torch

    torch.set_num_threads(1)
    rows: list[dict[str, Any]] = []
    for model in models:
        for seed in range(a.seeds):
            job = Job(model, seed, a.batch)
            from autotune.runtime.codecs.feedback import ErrorFeedback

            ef = ErrorFeedback(job.n)
            for _ in range(a.start):
                job.step(None, ef)
            snap = job.snapshot()
            for codec in codecs:
                for share in shares:
                    t0 = time.perf_counter()
                    runs = {mode: one(job, snap, codec, share, a.seconds, mode)
                            for mode in ("test", "codec", "lossless")}
                    wins = runs["codec"]["val"] < runs["lossless"]["val"]
                    row = {"model": model, "seed": seed, "codec": codec, "share": share,
                           "keep": runs["test"]["keep"], "codec_wins": wins,
                           "right": runs["test"]["keep"] == wins,
                           "excess": runs["test"]["val"] / runs["lossless"]["val"] - 1,
                           "codec_excess": runs["codec"]["val"] / runs["lossless"]["val"] - 1,
                           "runs": runs}
                    rows.append(row)
                    print(f"{model} seed {seed} {codec:9s} share {share:.1f}: kept "
                          f"{row['keep']!s:5s} codec wins {wins!s:5s} session "
                          f"{row['excess']:+.2%} codec alone {row['codec_excess']:+.2%} "
                          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    table = []
    for model in models:
        for codec in codecs:
            for share in shares:
                rs = [r for r in rows if (r["model"], r["codec"], r["share"]) == (model, codec, share)]
                table.append({"model": model, "codec": codec, "share": share,
                              "right": sum(r["right"] for r in rs), "of": len(rs),
                              "kept": sum(bool(r["keep"]) for r in rs),
                              "codec_wins": sum(r["codec_wins"] for r in rs),
                              "session_excess": statistics.median(r["excess"] for r in rs),
                              "codec_excess": statistics.median(r["codec_excess"] for r in rs)})
    print(f"\n{'job':4s} {'codec':9s} {'share':>5s} {'right':>6s} {'kept':>5s} {'wins':>5s} "
          f"{'session':>8s} {'codec':>8s}  (excess over lossless, medians of {a.seeds} seeds)")
    for t in table:
        print(f"{t['model']:4s} {t['codec']:9s} {t['share']:5.1f} {t['right']:>3d}/{t['of']:<2d} "
              f"{t['kept']:5d} {t['codec_wins']:5d} {t['session_excess']:+8.2%} "
              f"{t['codec_excess']:+8.2%}")
    right = sum(r["right"] for r in rows)
    print(f"the verdict matched the outcome in {right} of {len(rows)} cases")
    save({"args": {k: str(v) for k, v in vars(a).items()}, "table": table, "rows": rows,
          "machine": machine()}, a.out)
    print(f"JSON: {a.out}")


if __name__ == "__main__":
    main()
