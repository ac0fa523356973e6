"""A small GPT-style language model on synthetic tokens, trained under autotune.session().

    autotune launch --workers 4 --servers 2 examples/train_transformer.py --steps 300

Every worker draws its own shard of a synthetic "language" (a fixed random bigram model),
so the loss falls well below log(vocab) as the model learns it. No downloads.
"""

from __future__ import annotations

import argparse
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import autotune


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 256, d: int = 128, layers: int = 4, heads: int = 4, ctx: int = 64) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, ctx, d))
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos[:, : idx.shape[1]]
        return self.head(self.ln(self.blocks(x)))


def bigram_batches(vocab: int, ctx: int, batch: int, seed: int, rank: int):
    """An endless stream of sequences from one random bigram model, a shard per rank."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(vocab, vocab, generator=g) * 3
    probs = torch.softmax(logits, dim=1)
    gen = torch.Generator().manual_seed(seed * 1000 + rank + 1)
    while True:
        seq = torch.empty(batch, ctx + 1, dtype=torch.long)
        seq[:, 0] = torch.randint(vocab, (batch,), generator=gen)
        for t in range(ctx):
            seq[:, t + 1] = torch.multinomial(probs[seq[:, t]], 1, generator=gen).squeeze(1)
        yield seq[:, :-1], seq[:, 1:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--budget", type=int, default=100, help="tuning iterations")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--db", default=None, help="results database (default autotune.db)")
    ap.add_argument("--lossy", action="store_true", help="let the tuner try lossy codecs")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    vocab, ctx = 256, 64
    model = TinyGPT(vocab=vocab, ctx=ctx, layers=args.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rank = int(os.environ.get("RANK", 0))
    data = bigram_batches(vocab, ctx, args.batch, args.seed, rank)

    with autotune.session(model, budget=args.budget, db=args.db, allow_lossy=args.lossy,
                          samples_per_step=args.batch, job="train_transformer") as session:
        for step in range(args.steps):
            x, y = next(data)
            loss = F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
            loss.backward()
            session.step(loss=loss)  # with --lossy, a codec is kept only if the loss falls sooner
            opt.step()
            opt.zero_grad(set_to_none=False)
            if rank == 0 and (step % 50 == 0 or step == args.steps - 1):
                print(f"step {step:4d}  loss {loss.item():.3f}  (uniform would be {math.log(vocab):.3f})", flush=True)
    if rank == 0:
        from autotune.units import fmt_config

        print(f"kept configuration: {fmt_config(session.best)}", flush=True)


if __name__ == "__main__":
    main()
