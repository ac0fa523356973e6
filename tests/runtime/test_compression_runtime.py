"""Lossy codecs inside the runtime give exactly what decoding each worker's payload and
summing by hand gives, with error feedback, through both transports and every intra mode.

ONE job for the module: 4 workers as 2 emulated machines x 2, plus 1 server, started with
``autotune launch``. This file is also the workers' program (``python
tests/runtime/test_compression_runtime.py rank OUTDIR``): each worker runs the :func:`schedule` of
configurations, a few rounds each, on gradients every rank can recompute (seeded by round
and worker), and compares what ``rt.wait()`` left in ``.grad`` with :class:`Expected`, an
independent model of the averaging built from the codec functions only: each worker's
payload is ``encode(gradient + its residual)``, sums are decoded by hand, a Summation
Service's re-encoded sum keeps its own residual, residuals are kept per parameter (so they
follow any chunk layout or gradient order by construction), and a chunk that is not
encoded by a rank folds that rank's residual into what it sends, scaled down to at most
the chunk's own norm (``autotune.runtime.codecs.feedback.bounded``). The tests below check
the records.
"""

from __future__ import annotations

# own world: workers on two machines with Summation Service servers

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import runtime_helpers as rh

WORKERS, SERVERS, MACHINES = 4, 1, 2
KiB = 1024
# (shape, dtype, scale) in registration order: 59,111 float32 elements (three full 64 KiB
# chunks and a 43 KB one, below compress_min_bytes) and 40,000 float16 (one 64 KiB chunk
# and a small one)
SHAPES = (((200, 150), "float32", 1.0), ((20000,), "float32", 0.5), ((37, 3), "float32", 2.0),
          ((40000,), "float16", 0.25), ((9000,), "float32", 1.0))
CODECS = ("fp16", "bf16", "topk", "randomk", "onebit", "powersgd")
TRANSPORTS = (("allreduce", 0), ("pushpull", 0), ("pushpull", 1))
# |runtime - expected| / max|expected| per dtype. Sums that gloo's all-reduce computes (in
# its own order; float16/bfloat16 buffers in half precision) round differently from the
# model's; everything else is bit-for-bit the same arithmetic.
TOL = {"fp16": 4e-3, "bf16": 3e-2, "powersgd": 1e-3}
TOL_F32, TOL_F16 = 1e-5, 4e-3


def config(**kw: Any) -> dict:
    from autotune.tuning.space import SearchSpace

    space = SearchSpace.build(k_max=SERVERS, workers_per_machine=WORKERS // MACHINES,
                              allow_lossy=True)
    base = {"chunk_bytes": 64 * KiB, "compress_min_bytes": 64 * KiB, "topk_ratio": 0.01,
            "randomk_ratio": 0.1, "powersgd_rank": 2}
    return space.validate({**base, **kw})  # (inactive codec parameters fall back to defaults)


def schedule() -> list[tuple[str, dict, int]]:
    """(label, configuration, rounds) in run order."""
    flush = ("flush", config(), 1)  # compression=none: folds every residual back
    # ... through push/pull among all workers too, where a gradient's own chunks are
    # otherwise pushed from .grad itself (not in a round that must fold a residual first)
    flush_pp = ("flush/pushpull", config(transport="pushpull", servers=1), 1)
    out: list[tuple[str, dict, int]] = [
        # round 0 runs in registration-reversed order, round 1 in the learnt one: worker
        # residuals move with their gradients, the Summation Services' are handed back
        ("relayout", config(compression="topk", transport="pushpull", servers=1), 2),
        flush,
    ]
    for i, codec in enumerate(CODECS):
        for t, k in TRANSPORTS:
            out.append((f"{codec}/{t}/k{k}", config(compression=codec, transport=t, servers=k), 2))
        out.append(flush_pp if i % 2 else flush)
    out += [
        ("topk/allreduce/root1", config(compression="topk", intra="root", reduce_root=1,
                                        streams=2), 2),
        ("onebit/pushpull/k1/scatter", config(compression="onebit", transport="pushpull",
                                              servers=1, intra="scatter"), 2),
        ("powersgd/allreduce/scatter", config(compression="powersgd", intra="scatter"), 2),
        flush,
        ("randomk/pushpull/k0/root0", config(compression="randomk", transport="pushpull",
                                             intra="root"), 2),
        ("fp16/allreduce/scatter", config(compression="fp16", intra="scatter", streams=3), 2),
        ("bf16/pushpull/k1/root1", config(compression="bf16", transport="pushpull", servers=1,
                                          intra="root", reduce_root=1), 2),
        flush,
        # residuals across switches: same chunk layout (streams only), then a new layout
        ("keep/a", config(compression="topk"), 2),
        ("keep/b", config(compression="topk", streams=2), 1),
        ("layout", config(compression="topk", streams=2, chunk_bytes=128 * KiB), 1),
        # a 26,343-element chunk: one-bit payloads of 3,297 bytes, all-gathered back to back
        ("odd", config(compression="onebit", streams=2, chunk_bytes=128 * KiB), 1),
        ("server", config(compression="onebit", transport="pushpull", servers=1,
                          chunk_bytes=128 * KiB), 2),
        ("final", config(streams=2), 1),
    ]
    return out


# ====================================================================== pytest side
@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("compression_runtime")
    code, log = rh.launch_group("rank", out, WORKERS, SERVERS, MACHINES, timeout=400,
                                script=Path(__file__))
    assert code == 0, log[-6000:]
    return rh.load_results(out, WORKERS)


SCHEDULE = schedule()
ROUNDS = [(label, cfg) for label, cfg, n in SCHEDULE for _ in range(n)]


def _tolerance(cfg: dict, dtype: str) -> float:
    tol = TOL.get(cfg["compression"], TOL_F32)
    return max(tol, TOL_F16) if dtype == "float16" else tol


@pytest.mark.parametrize("label", list(dict.fromkeys(label for label, _, _ in SCHEDULE)))
def test_matches_decoding_and_summing_by_hand(records: list[dict], label: str) -> None:
    checked = 0
    for r, rec in enumerate(records):
        for (lab, cfg), rnd in zip(ROUNDS, rec["rounds"]):
            if lab != label:
                continue
            assert rnd["config"] == cfg, f"rank {r} ran another configuration"
            for dtype, err in rnd["err"].items():
                assert err <= _tolerance(cfg, dtype), (r, rnd)
            checked += 1
    assert checked >= WORKERS


def test_lossy_rounds_really_compress(records: list[dict]) -> None:
    """The runtime's result is NOT the exact average on lossy rounds: compression
    happened (and the model above agrees with what it did)."""
    for rec in records:
        for (label, cfg), rnd in zip(ROUNDS, rec["rounds"]):
            far = rnd["from_exact"]["float32"]
            if cfg["compression"] in ("fp16", "bf16"):
                assert far > 1e-6, (label, rnd)
            elif cfg["compression"] != "none":
                assert far > 0.05, (label, rnd)
    assert all(len(rec["rounds"]) == len(ROUNDS) for rec in records)


def test_every_codec_through_both_transports_and_intra_modes() -> None:
    seen = {(c["compression"], c["transport"], c["servers"] if c["transport"] == "pushpull"
             else -1, c["intra"]) for _, c in ROUNDS}
    for codec in CODECS:
        for t, k in TRANSPORTS:
            assert (codec, t, k if t == "pushpull" else -1, "flat") in seen
    assert {i for _, _, _, i in seen} == {"flat", "root", "scatter"}


def test_residuals_move_with_their_gradients_when_the_order_is_learnt(records: list[dict]
                                                                      ) -> None:
    for r, rec in enumerate(records):
        first, second = rec["rounds"][0], rec["rounds"][1]
        assert first["order"] == [4, 3, 2, 1, 0] and second["order"] == [2, 1, 4, 0, 3]
        # round 0 left residuals in the old layout; round 1 matched the model (above).
        # Moving them changes nothing in their size on ranks 1 and 3; ranks 0 and 2 host
        # their machine's Summation Service, whose residual came back to them (and the
        # dedicated server's to rank 0) since the units it re-encodes moved.
        before = {k: v for k, v in second["norms_before_sync"].items() if k.startswith("worker")}
        after = {k: second["norms_after_sync"][k] for k in before}
        assert before and all(v > 0 for v in before.values())
        if r in (1, 3):
            assert after == pytest.approx(before, rel=1e-6), r
        else:
            assert sum(v * v for v in after.values()) > 1.01 * sum(v * v for v in before.values())


def test_residuals_survive_a_switch_that_keeps_the_layout(records: list[dict]) -> None:
    for rec in records:
        rounds = dict(zip((lab for lab, _ in ROUNDS), rec["rounds"]))  # last round per label
        b = rounds["keep/b"]
        worker = {k: v for k, v in b["norms_before_sync"].items() if k.startswith("worker")}
        assert worker and any(v > 0 for v in worker.values())
        for k, v in worker.items():
            assert b["norms_after_sync"][k] == pytest.approx(v, rel=1e-6), (k, b)
        # a new chunk layout re-slices the same per-element residuals: nothing dropped
        lay = rounds["layout"]
        for k, v in lay["norms_before_sync"].items():
            if k.startswith("worker"):
                assert lay["norms_after_sync"][k] == pytest.approx(v, rel=1e-6), (k, lay)


def test_nothing_is_dropped(records: list[dict]) -> None:
    """Between two lossless rounds every residual (the workers' and the Summation
    Services', a dedicated server's handed back to the leader) has been sent, as far as
    leaving a codec sends it (at most a chunk's own gradient's norm of it; the model
    counts what that drops, issue 62): what the runtime delivered adds up to what the
    workers produced, less that. Exactly (to float32 rounding)
    unless the segment summed half-precision payloads: error feedback keeps what a worker's
    own encoding dropped, not what rounding the SUM to fp16/bf16 drops."""
    half = {label for label, cfg in ROUNDS if cfg["compression"] in ("fp16", "bf16")}
    for r, rec in enumerate(records):
        segments = rec["segments"]
        assert len(segments) == sum(1 for _, c in ROUNDS if c["compression"] == "none")
        assert all(seg["clean"] for seg in segments), segments
        assert segments[-1]["labels"][-1] == "final"
        for seg in segments:
            rounded = any(label in half for label in seg["labels"])
            f32 = seg["err"]["float32"]
            assert f32 <= (1e-2 if rounded else 1e-5), (r, seg)
            assert seg["err"]["float16"] <= (1e-2 if rounded else 2e-3), (r, seg)
    # the leader took the server's residual over at the switch to "final"
    lead = dict(zip((lab for lab, _ in ROUNDS), records[0]["rounds"]))["final"]
    grew = [k for k, v in lead["norms_after_sync"].items()
            if k.startswith("worker") and v > lead["norms_before_sync"].get(k, 0.0) * 1.01]
    assert grew, lead


# ====================================================================== the model
class Expected:
    """What the averaged gradients must be, from the codec functions alone."""

    def __init__(self, info: Any, sizes: list[tuple[int, str]]) -> None:
        self.info = info
        self.sizes = sizes                     # (numel, dtype) per registration index
        self.res: dict[tuple[str, int], dict[int, Any]] = {}  # ("w"|"s", rank) -> reg -> float32
        self.skey: dict[int, tuple] = {}
        self.cfg: dict | None = None
        self.order: list[int] | None = None
        self.codec: Any = None
        self.dropped: dict[int, Any] = {}  # reg -> float64: what leaving a codec dropped
        # holder -> reg -> bool per element: residual another codec made, not sent since
        self.foreign: dict[tuple[str, int], dict[int, Any]] = {}
        self.encoder: dict[tuple[str, int], str] = {}  # holder -> the codec it encodes by

    # ------------------------------------------------------------ residual store
    def _flat(self, holder: tuple[str, int], dtype: str, order: list[int], res: dict | None = None,
              kind: Any = None) -> Any:
        import torch

        res = self.res if res is None else res
        parts = [res.get(holder, {}).get(i, torch.zeros(self.sizes[i][0], dtype=kind))
                 for i in order if self.sizes[i][1] == dtype]
        return torch.cat(parts) if parts else torch.zeros(0, dtype=kind)

    def _unflat(self, holder: tuple[str, int], dtype: str, order: list[int], vec: Any,
                res: dict | None = None) -> None:
        store, pos = (self.res if res is None else res).setdefault(holder, {}), 0
        for i in order:
            n, d = self.sizes[i]
            if d == dtype:
                store[i] = vec[pos:pos + n].clone()
                pos += n

    def _pending(self, holder: tuple[str, int]) -> bool:
        return any(bool(v.any()) for v in self.res.get(holder, {}).values())

    # ------------------------------------------------------------ switches
    def switch(self, cfg: dict, order: list[int]) -> None:
        from autotune.runtime.codecs import codec_from_config
        from autotune.runtime.data.compression import CODEC_SEED

        if cfg == self.cfg and order == self.order:
            return
        relaid = order != self.order
        info = self.info
        flat = cfg["intra"] == "flat"
        payloads = len(info.workers) if flat else info.n_machines
        self.cfg, self.order = dict(cfg), list(order)
        self.codec = (None if cfg["compression"] == "none" else
                      codec_from_config(cfg, world_size=payloads, seed=CODEC_SEED))
        keys = self._summation_keys()
        for r in range(info.world_size):
            holder = ("s", r)
            if self._pending(holder) and (relaid or keys.get(r, ()) != self.skey.get(r, ())):
                to = ("w", r if r in info.workers else info.leader)
                dst = self.res.setdefault(to, {})
                for i, v in self.res.pop(holder).items():
                    dst[i] = dst[i] + v if i in dst else v.clone()
        self.skey = keys
        if self.codec is not None and not self.codec.lossless:  # a switch of codec: what
            for w in info.workers:  # another codec held back is foreign until sent
                holder = ("w", w)
                if self.encoder.get(holder, self.codec.name) != self.codec.name:
                    self.foreign[holder] = {i: v != 0 for i, v in self.res.get(holder, {}).items()}
                self.encoder[holder] = self.codec.name

    def _plan(self) -> list:
        from autotune.runtime.data.plan import make_plan

        return make_plan([self.sizes[i] for i in self.order], self.cfg, self.info)

    def _lossy(self, c: Any) -> bool:
        return self.codec is not None and c.nbytes >= self.cfg["compress_min_bytes"]

    def _summation_keys(self) -> dict[int, tuple]:
        from autotune.runtime.data.plan import shard_bounds, shards_per_chunk

        if self.codec is None or self.codec.summable or self.cfg["transport"] != "pushpull":
            return {}
        keys: dict[int, set] = {}
        shards = shards_per_chunk(self.cfg, self.info)
        for c in self._plan():
            if self._lossy(c):
                for a, k in shard_bounds(c.numel, shards):
                    if k:
                        keys.setdefault(c.owner, set()).add((c.dtype, c.offset + a, k))
        ident = (self.codec.name, tuple(sorted(self.codec.params().items())))
        return {r: (ident, tuple(sorted(u))) for r, u in keys.items()}

    # ------------------------------------------------------------ one round
    def average(self, grads: dict[int, list], rnd: int) -> list:
        """The averaged gradient per registration index, given every worker's gradients."""
        import torch

        from autotune.runtime.data.plan import flat_layout, pushers, shard_bounds, shards_per_chunk

        info, cfg, order = self.info, self.cfg, self.order
        sizes = [self.sizes[i] for i in order]
        _, totals = flat_layout(sizes)
        holders = [("w", w) for w in info.workers] + [("s", r) for r in range(info.world_size)]
        R = {h: {d: self._flat(h, d, order) for d in totals} for h in holders}
        self.F = {h: {d: self._flat(h, d, order, self.foreign, torch.bool) for d in totals}
                  for h in holders}  # foreign residual (another codec's), not sent since
        self.D = D = {d: torch.zeros(n, dtype=torch.float64) for d, n in totals.items()}
        X = {w: {d: torch.cat([grads[w][i].reshape(-1) for i in order if self.sizes[i][1] == d])
                 for d in totals} for w in info.workers}
        out = {d: torch.zeros(n, dtype=getattr(torch, d)) for d, n in totals.items()}
        machines = [info.machine_workers(m) for m in info.worker_machines]
        shards = shards_per_chunk(cfg, info)
        n_workers = len(info.workers)
        for c in self._plan():
            d, o, n = c.dtype, c.offset, c.numel
            lossy = self._lossy(c)
            xs = {w: X[w][d][o:o + n].clone() for w in info.workers}
            if not (lossy and cfg["intra"] == "flat"):
                for w in info.workers:  # fold: the residual goes out with the gradient,
                    r = R[("w", w)][d][o:o + n]  # at most the gradient's norm of it (issue 62)
                    held = float(r.norm())
                    if held:
                        scale = min(1.0, float(xs[w].float().norm()) / held)
                        xs[w].add_(r * scale)
                        D[d][o:o + n] += r.double() * (1.0 - scale)
                    R[("w", w)][d][o:o + n] = 0
                    self.F[("w", w)][d][o:o + n] = False
            if cfg["intra"] == "flat":
                parts = [(w, xs[w]) for w in info.workers]
                total = (self._exchange(c, 0, 0, parts, R, rnd) if lossy
                         else self._plain(c, 0, parts))
            else:
                sums = [xs[m[0]] + xs[m[1]] for m in machines]
                if cfg["intra"] == "root":
                    j = int(cfg["reduce_root"])
                    parts = [(m[j], s) for m, s in zip(machines, sums)]
                    total = (self._exchange(c, 0, 0, parts, R, rnd) if lossy
                             else self._plain(c, 0, parts))
                else:
                    total = torch.zeros(n, dtype=torch.float32 if lossy else getattr(torch, d))
                    for j, (a, k) in enumerate(shard_bounds(n, shards)):
                        if not k:
                            continue
                        parts = [(m[j], s[a:a + k]) for m, s in zip(machines, sums)]
                        assert [p for p, _ in parts] == list(pushers(cfg, info, j))
                        total[a:a + k] = (self._exchange(c, j, a, parts, R, rnd) if lossy
                                          else self._plain(c, j, parts))
            out[d][o:o + n] = total.to(out[d].dtype)
            out[d][o:o + n].div_(n_workers)
        for h in holders:
            for d in totals:
                self._unflat(h, d, order, R[h][d])
                self._unflat(h, d, order, self.F[h][d], self.foreign)
        result: list = [None] * len(self.sizes)
        pos = dict.fromkeys(totals, 0)
        for i in order:
            n, d = self.sizes[i]
            result[i] = out[d][pos[d]:pos[d] + n].clone()
            drop = D[d][pos[d]:pos[d] + n]
            self.dropped[i] = self.dropped[i] + drop if i in self.dropped else drop.clone()
            pos[d] += n
        return result

    def take_dropped(self, i: int) -> Any:
        """What leaving a codec dropped of parameter ``i``'s residuals since last asked
        (summed over the workers, float64)."""
        import torch

        return self.dropped.pop(i, torch.zeros(self.sizes[i][0], dtype=torch.float64))

    def _plain(self, c: Any, shard: int, parts: list) -> Any:
        total = parts[0][1].clone()
        for _, x in parts[1:]:
            total += x
        return total

    def _compensate(self, holder: tuple, d: str, lo: int, hi: int, x: Any, R: dict) -> Any:
        """``x`` plus the holder's residual of ``[lo, hi)``: whole if this codec made it,
        else (part of it foreign) at most ``x``'s norm of it, the rest dropped (issue 62);
        none of it is foreign from now on."""
        r, foreign = R[holder][d][lo:hi], self.F[holder][d][lo:hi]
        held = float(r.norm())
        if held and bool(foreign.any()):
            scale = min(1.0, float(x.norm()) / held)
            self.D[d][lo:hi] += r.double() * (1.0 - scale)
            r = r * scale
        foreign[:] = False
        return x + r

    def _exchange(self, c: Any, shard: int, start: int, parts: list, R: dict, rnd: int) -> Any:
        """Each encoder's payload of (its part + its residual), summed as the transport does."""
        import torch

        from autotune.runtime.codecs import Context
        from autotune.runtime.data.plan import shards_per_chunk

        codec, cfg = self.codec, self.cfg
        d, k = c.dtype, parts[0][1].numel()
        lo, hi = c.offset + start, c.offset + start + k
        ctx = Context(rnd, c.index * shards_per_chunk(cfg, self.info) + shard)
        packed = {}
        for rank, x in parts:
            comp = self._compensate(("w", rank), d, lo, hi, x.to(torch.float32), R)
            payload = codec.encode(comp, ctx)
            R[("w", rank)][d][lo:hi] = comp - codec.decode(payload, k, ctx)
            packed[rank] = codec.pack(payload)
        ranks = [r for r, _ in parts]
        if cfg["transport"] == "pushpull":  # the owner's own part first, as it sums them
            ranks = [r for r in ranks if r == c.owner] + [r for r in ranks if r != c.owner]
        if codec.summable:
            acc = packed[ranks[0]].to(torch.float32).clone()
            for r in ranks[1:]:
                acc += packed[r].to(torch.float32)
            payload = codec.unpack(acc.to(codec.wire_dtype), k)
            total = codec.decode(payload, k, ctx)
            codec.after_sum(payload, k, ctx)
            return total
        total = codec.decode(codec.unpack(packed[ranks[0]], k), k, ctx).clone()
        for r in ranks[1:]:
            total += codec.decode(codec.unpack(packed[r], k), k, ctx)
        if cfg["transport"] == "allreduce":
            return total
        comp = self._compensate(("s", c.owner), d, lo, hi, total, R)  # the Summation
        payload = codec.encode(comp, ctx)                               # Service re-encodes
        R[("s", c.owner)][d][lo:hi] = comp - codec.decode(payload, k, ctx)
        return codec.decode(codec.unpack(codec.pack(payload), k), k, ctx)


# ====================================================================== rank side
def _gradients(rnd: int, worker: int) -> list:
    import torch

    g = torch.Generator().manual_seed(7919 * rnd + worker)
    return [(torch.randn(shape, generator=g) * scale).to(getattr(torch, dtype))
            for shape, dtype, scale in SHAPES]


def _rel(a: list, b: list, dtype: str) -> float:
    pairs = [(x, y) for x, y in zip(a, b) if str(y.dtype).endswith(dtype)]
    diff = max(float((x.float().reshape(-1) - y.float().reshape(-1)).abs().max()) for x, y in pairs)
    scale = max(float(y.float().abs().max()) for _, y in pairs)
    return diff / max(scale, 1e-30)


def _conservation(delivered: list, produced: list, dtype: str) -> float:
    """max |delivered - produced| / max |produced| over the parameters of ``dtype``."""
    pairs = [(a, b) for a, b, (_, d, _) in zip(delivered, produced, SHAPES) if d == dtype]
    diff = max(float((a - b).abs().max()) for a, b in pairs)
    return diff / max(max(float(b.abs().max()) for _, b in pairs), 1e-30)


def run_rank(out: Path) -> None:
    import torch
    import torch.distributed as dist

    from autotune.runtime import Runtime

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rt = Runtime.bootstrap(timeout=120)
    info = rt.info
    leader = info.rank == info.leader
    params = [torch.nn.Parameter(torch.zeros(shape, dtype=getattr(torch, dtype)))
              for shape, dtype, _ in SHAPES]
    rt.register(params)
    model = Expected(info, [(p.numel(), dtype) for p, (_, dtype, _) in zip(params, SHAPES)])
    n = len(info.workers)
    delivered = [torch.zeros(p.shape, dtype=torch.float64) for p in params]
    produced = [torch.zeros(p.shape, dtype=torch.float64) for p in params]
    segment: list[str] = []
    rec: dict[str, Any] = {"rounds": [], "segments": []}
    for label, cfg, rounds in schedule():
        for _ in range(rounds):
            before = rt.residual_norms
            active = rt.sync(cfg if leader else None)
            after = rt.residual_norms
            model.switch(active, rt.gradient_order)
            rnd = rt.round
            grads = {w: _gradients(rnd, w) for w in info.workers}
            for p in params:
                p.grad = None
            mine = grads[info.rank]
            # terms made in this order: hooks fire in its reverse, unlike the registration
            terms = [(params[i] * mine[i]).sum().float() for i in (3, 0, 4, 1, 2)]
            torch.stack(terms).sum().backward()
            rt.wait()
            got = [p.grad.detach().clone() for p in params]
            expected = model.average(grads, rnd)
            exact = [sum(grads[w][i].float() for w in info.workers) / n
                     for i in range(len(params))]
            for i, p in enumerate(params):
                delivered[i] += got[i].double() * n
                produced[i] += sum(grads[w][i].double() for w in info.workers)
                produced[i] -= model.take_dropped(i).view(p.shape)  # meant to be dropped
            segment.append(label)
            rec["rounds"].append({
                "label": label, "config": active, "round": rnd, "order": rt.gradient_order,
                "err": {d: _rel(got, expected, d) for d in ("float32", "float16")},
                "from_exact": {"float32": _rel(got, exact, "float32")},
                "norms_before_sync": before, "norms_after_sync": after,
                "norms_after_wait": rt.residual_norms,
            })
            if active["compression"] == "none":  # every residual went out: a clean point
                rec["segments"].append({
                    "labels": segment,
                    "clean": all(v == 0 for v in rt.residual_norms.values()),
                    "err": {d: _conservation(delivered, produced, d) for d in ("float32", "float16")},
                })
                segment = []
                for t in delivered + produced:
                    t.zero_()
    rt.sync(stop=True) if leader else rt.sync()
    rt.shutdown()
    (out / f"rank{info.rank}.json").write_text(json.dumps(rec))
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] != "rank":
        raise SystemExit(f"unknown mode {sys.argv[1]}")
    outdir = Path(sys.argv[2])
    outdir.mkdir(parents=True, exist_ok=True)
    run_rank(outdir)
