"""Transformer models of the zoo: BERT, GPT-2 and the Vaswani et al. Transformer.

Written from the papers and the reference implementations' layouts, no downloads:

- ``Bert``: Hugging Face ``BertModel`` (embeddings, encoder, pooler), same parameter names
  and shapes. bert-base 109,482,240 and bert-large 335,141,888 parameters with the
  30,522-token WordPiece embeddings (the pre-training heads are not included).
- ``GPT2``: Hugging Face ``GPT2LMHeadModel`` (its ``Conv1D`` weights are stored
  ``(in, out)``; the LM head is tied to the token embedding, so it adds no parameters).
  gpt2 124,439,808, gpt2-medium 354,823,168, gpt2-xl 1,557,611,200.
- ``Transformer``: the "base" model of Vaswani et al. 2017 (6+6 layers, d_model 512,
  d_ff 2048, 8 heads, post-norm, sinusoidal positions) with one 37,000-token embedding
  shared by encoder input, decoder input and the pre-softmax projection, as the paper
  describes: 63,082,496 parameters (the paper's Table 3 rounds its count to 65M).

Every ``forward`` works on a real device, so a few real steps can time the compute.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
               causal: bool = False) -> torch.Tensor:
    b, tq, d = q.shape
    tk = k.shape[1]

    def split(x: torch.Tensor, t: int) -> torch.Tensor:
        return x.view(b, t, heads, d // heads).transpose(1, 2)

    out = F.scaled_dot_product_attention(split(q, tq), split(k, tk), split(v, tk),
                                         is_causal=causal)
    return out.transpose(1, 2).reshape(b, tq, d)


# ------------------------------------------------------------------------------- BERT
class BertSelfAttention(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)


class BertDenseNorm(nn.Module):
    """``dense`` + residual + ``LayerNorm`` (BertSelfOutput / BertOutput)."""

    def __init__(self, cin: int, hidden: int) -> None:
        super().__init__()
        self.dense = nn.Linear(cin, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class BertAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.self = BertSelfAttention(hidden)
        self.output = BertDenseNorm(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.self
        ctx = _attention(s.query(x), s.key(x), s.value(x), self.heads)
        return self.output(ctx, x)


class BertIntermediate(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, ffn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attention = BertAttention(hidden, heads)
        self.intermediate = BertIntermediate(hidden, ffn)
        self.output = BertDenseNorm(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention(x)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(hidden, heads, ffn) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x)
        return x


class BertEmbeddings(nn.Module):
    def __init__(self, vocab: int, hidden: int, max_positions: int, type_vocab: int) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = (self.word_embeddings(ids) + self.position_embeddings(pos)[None]
             + self.token_type_embeddings(torch.zeros_like(ids)))
        return self.LayerNorm(x)


class BertPooler(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x[:, 0]))


class Bert(nn.Module):
    """``forward(ids) -> (sequence_output, pooled_output)``."""

    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12,
                 ffn: int | None = None, vocab: int = 30522, max_positions: int = 512,
                 type_vocab: int = 2) -> None:
        super().__init__()
        self.vocab = vocab
        self.embeddings = BertEmbeddings(vocab, hidden, max_positions, type_vocab)
        self.encoder = BertEncoder(layers, hidden, heads, ffn or 4 * hidden)
        self.pooler = BertPooler(hidden)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seq = self.encoder(self.embeddings(ids))
        return seq, self.pooler(seq)


def bert_base(**kw) -> Bert:
    return Bert(**{"layers": 12, "hidden": 768, "heads": 12, **kw})


def bert_large(**kw) -> Bert:
    return Bert(**{"layers": 24, "hidden": 1024, "heads": 16, **kw})


# ------------------------------------------------------------------------------ GPT-2
class Conv1D(nn.Module):
    """GPT-2's linear layer with its weight stored ``(in, out)``."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cin, cout))
        self.bias = nn.Parameter(torch.zeros(cout))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(
            *x.shape[:-1], self.weight.shape[1])


class GPT2Attention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(hidden, 3 * hidden)
        self.c_proj = Conv1D(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.c_attn(x).split(x.shape[-1], dim=2)
        return self.c_proj(_attention(q, k, v, self.heads, causal=True))


class GPT2MLP(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.c_fc = Conv1D(hidden, 4 * hidden)
        self.c_proj = Conv1D(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.attn = GPT2Attention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.mlp = GPT2MLP(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, vocab: int,
                 positions: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(positions, hidden)
        self.h = nn.ModuleList(GPT2Block(hidden, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(pos)[None]
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2(nn.Module):
    """``forward(ids) -> logits``; the LM head shares the token embedding."""

    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12,
                 vocab: int = 50257, positions: int = 1024) -> None:
        super().__init__()
        self.vocab = vocab
        self.transformer = GPT2Model(layers, hidden, heads, vocab, positions)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.transformer(ids))


def gpt2_small(**kw) -> GPT2:
    return GPT2(**{"layers": 12, "hidden": 768, "heads": 12, **kw})


def gpt2_medium(**kw) -> GPT2:
    return GPT2(**{"layers": 24, "hidden": 1024, "heads": 16, **kw})


def gpt2_xl(**kw) -> GPT2:
    return GPT2(**{"layers": 48, "hidden": 1600, "heads": 25, **kw})


# ------------------------------------------------------------------- Transformer (base)
class MultiheadAttention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, mem: torch.Tensor, causal: bool = False) -> torch.Tensor:
        ctx = _attention(self.q_proj(x), self.k_proj(mem), self.v_proj(mem), self.heads,
                         causal=causal)
        return self.out_proj(ctx)


class EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(d, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.fc2 = nn.Linear(ffn, d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.self_attn_layer_norm(x + self.self_attn(x, x))
        return self.final_layer_norm(x + self.fc2(F.relu(self.fc1(x))))


class DecoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(d, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = MultiheadAttention(d, heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.fc2 = nn.Linear(ffn, d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, mem: torch.Tensor) -> torch.Tensor:
        x = self.self_attn_layer_norm(x + self.self_attn(x, x, causal=True))
        x = self.encoder_attn_layer_norm(x + self.encoder_attn(x, mem))
        return self.final_layer_norm(x + self.fc2(F.relu(self.fc1(x))))


def _sinusoid(t: int, d: int, device: torch.device) -> torch.Tensor:
    pos = torch.arange(t, device=device, dtype=torch.float32)[:, None]
    i = torch.arange(0, d, 2, device=device, dtype=torch.float32)
    angle = pos / torch.pow(10000.0, i / d)
    out = torch.zeros(t, d, device=device)
    out[:, 0::2] = torch.sin(angle)
    out[:, 1::2] = torch.cos(angle)
    return out


class TransformerStack(nn.Module):
    def __init__(self, embed: nn.Embedding, layers: nn.ModuleList) -> None:
        super().__init__()
        self.embed_tokens = embed
        self.layers = layers

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        d = self.embed_tokens.embedding_dim
        return self.embed_tokens(ids) * math.sqrt(d) + _sinusoid(ids.shape[1], d, ids.device)


class Transformer(nn.Module):
    """``forward(src, tgt) -> logits``: the encoder-decoder of "Attention Is All You
    Need" with one shared token embedding (also the output projection)."""

    def __init__(self, layers: int = 6, d_model: int = 512, heads: int = 8,
                 ffn: int = 2048, vocab: int = 37000) -> None:
        super().__init__()
        self.vocab = vocab
        embed = nn.Embedding(vocab, d_model)
        self.encoder = TransformerStack(
            embed, nn.ModuleList(EncoderLayer(d_model, heads, ffn) for _ in range(layers)))
        self.decoder = TransformerStack(
            embed, nn.ModuleList(DecoderLayer(d_model, heads, ffn) for _ in range(layers)))

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        mem = self.encoder.embed(src)
        for layer in self.encoder.layers:
            mem = layer(mem)
        x = self.decoder.embed(tgt)
        for layer in self.decoder.layers:
            x = layer(x, mem)
        return F.linear(x, self.decoder.embed_tokens.weight)


def transformer_base(**kw) -> Transformer:
    return Transformer(**kw)
