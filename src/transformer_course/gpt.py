"""Chapter 6, A GPT: causal language modelling with the chapter-4 block.

A GPT predicts every next token of a sequence at once (Turner §4.1):

    ids (B, N) -> token embeddings + positions (B, N, D)
               -> M pre-norm blocks with the causal mask, then a final norm
               -> logits (B, N, V): a softmax head over the vocabulary

The causal mask makes row n of the output depend on tokens 0..n only, so one
pass gives all N predictions p(w_{n+1} | w_{0..n}) for training, and a token
appended later changes nothing computed before it (the incremental property):
generation can keep each block's keys and values in a
:class:`~transformer_course.kv_cache.KVCache` and process one new token per
step (:func:`generate`).

The head's weights are, by default, the token embeddings themselves (weight
tying, Press & Wolf 2017; GPT-2): the score of token w is ``h_n · g_w`` with
``g_w`` the embedding of w. Initialisation follows GPT-2: normal(0, 0.02)
weights, zero biases, and the projections that write into the residual
stream scaled down by √(2M).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from .block import BlockConfig, BlockStack
from .kv_cache import KVCache
from .positions import LearnedPositions, SinusoidalPositions
from .shapes import (
    ShapeError,
    expect_choice,
    expect_positive_int,
    expect_shape,
    expect_token_ids,
)

__all__ = ["GPT", "GPTConfig", "generate", "sample_next", "sequence_cross_entropy"]

POSITIONS = ("learned", "none", "rope", "sinusoidal")


@dataclass
class GPTConfig:
    """Chapter 6: everything that defines a :class:`GPT`, in one place."""

    vocab_size: int  # V, the number of token ids
    block_size: int  # the context: the most tokens the model reads at once
    n_layers: int = 4  # M, the number of blocks
    n_heads: int = 4  # H
    d_model: int = 128  # D
    d_mlp: int | None = None  # the MLP's hidden width; None: 4·D
    dropout: float = 0.0  # on embeddings, attention and both branches, in training
    bias: bool = True  # biases in the linear layers and β in the norms
    positions: Literal["learned", "none", "rope", "sinusoidal"] = "learned"  # ch. 5
    tie_weights: bool = True  # the head's weights are the token embeddings
    norm: Literal["layer", "rms"] = "layer"  # the blocks' and the final norm

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layers"):
            expect_positive_int(getattr(self, name), name)
        expect_choice(self.positions, "positions", POSITIONS)
        expect_choice(self.norm, "norm", ("layer", "rms"))  # "none": chapter 4's
        self.block_config()  # checks d_model, n_heads, d_mlp, dropout

    def block_config(self) -> BlockConfig:
        """The chapter-4 :class:`BlockConfig` of every block."""
        return BlockConfig(
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_mlp=self.d_mlp,
            dropout=self.dropout,
            bias=self.bias,
            norm=self.norm,
            rotary=self.positions == "rope",
            max_len=self.block_size if self.positions == "rope" else None,
        )


class GPT(nn.Module):
    """Chapter 6: a decoder-only transformer, ids (B, N) -> next-token logits (B, N, V).

    Args:
        config: a :class:`GPTConfig`.

    Submodules: ``token_embedding`` (V, D); ``positions`` (chapter 5: learned
    or sinusoidal, added to the tokens; None for rotary, which lives in the
    blocks, or for none); ``blocks``, a chapter-4 :class:`BlockStack` whose
    final norm normalises the last block's output; ``head``, D -> V without
    bias, its weight shared with ``token_embedding`` when ``tie_weights``.
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        c = self.config = config
        self.token_embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.positions: nn.Module | None = {
            "learned": lambda: LearnedPositions(c.block_size, c.d_model),
            "sinusoidal": lambda: SinusoidalPositions(c.d_model),
        }.get(c.positions, lambda: None)()
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = BlockStack(c.block_config(), c.n_layers)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self._init_weights()
        if c.tie_weights:
            self.head.weight = self.token_embedding.weight  # g_w = embedding of w

    def _init_weights(self) -> None:
        """GPT-2's: N(0, 0.02), zero biases, residual writers N(0, 0.02/√(2M))."""
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layers)
        for block in self.blocks.blocks:
            nn.init.normal_(block.attn.out_proj.weight, std=residual_std)
            nn.init.normal_(block.mlp.down_proj.weight, std=residual_std)
        if isinstance(self.positions, LearnedPositions):
            nn.init.normal_(self.positions.weight, std=0.02)

    def forward(self, ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """ids (B, N) -> logits (B, N, V); row n predicts the token after token n.

        With a ``cache`` (from :meth:`new_cache`) the ids continue the tokens
        it holds: their positions start at ``cache.length``, and their keys
        and values are added to it.
        """
        expect_token_ids(ids, self.config.vocab_size)  # (B, N), in 0..V − 1
        start = 0 if cache is None else cache.length
        end = start + ids.shape[1]
        if end > self.config.block_size:
            raise ShapeError(
                f"ids: positions {start}..{end - 1} go past the context of "
                f"block_size = {self.config.block_size} tokens; crop the sequence"
            )
        x = self.token_embedding(ids)  # (B, N, D)
        if self.positions is not None:
            x = self.positions(x, offset=start)  # x_n + e_{start + n}
        x = self.dropout(x)
        x = self.blocks(x, is_causal=True, cache=cache)  # (B, N, D), final norm
        return self.head(x)  # (B, N, V)

    def new_cache(self, batch_size: int, max_len: int | None = None) -> KVCache:
        """An empty :class:`KVCache` for this model, on its device and dtype.

        ``max_len`` defaults to the context, ``block_size``.
        """
        c = self.config
        weight = self.token_embedding.weight
        return KVCache(
            c.n_layers,
            batch_size,
            c.n_heads,
            c.block_size if max_len is None else max_len,
            c.d_model // c.n_heads,
            dtype=weight.dtype,
            device=weight.device,
        )

    def parameter_count(self) -> dict[str, int]:
        """Parameters by part; a tied head counts once, under the embeddings."""
        counts = {
            "token embedding": self.token_embedding.weight.numel(),
            "positions": sum(
                p.numel() for p in (self.positions or nn.Module()).parameters()
            ),
            "blocks": sum(p.numel() for p in self.blocks.blocks.parameters()),
            "final norm": sum(p.numel() for p in self.blocks.final_norm.parameters()),
            "head": 0 if self.config.tie_weights else self.head.weight.numel(),
        }
        counts["total"] = sum(counts.values())
        return counts


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Chapter 6: one token per row from logits (B, V) -> (B,) ids.

    ``temperature`` divides the logits: below 1 sharpens the distribution,
    above 1 flattens it, 0 takes the most likely token (greedy). ``top_k``
    keeps the k largest logits of each row and samples among them only.
    """
    expect_shape(logits, "B V", "logits")
    if not temperature >= 0:
        raise ValueError(f"temperature: expected a float ≥ 0, got {temperature!r}")
    V = logits.shape[-1]
    if top_k is not None:
        expect_positive_int(top_k, "top_k")  # None: no filtering
    if temperature == 0:
        return logits.argmax(dim=-1)  # (B,)
    logits = logits / temperature
    if top_k is not None and top_k < V:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1): the k-th largest
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]  # (B,)


@torch.no_grad()
def generate(
    model: GPT,
    ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Chapter 6: continue ids (B, N) by ``max_new_tokens`` sampled tokens -> (B, N + new).

    Each step feeds the model the last ``block_size`` tokens at most and
    samples the next token from the last row of logits (:func:`sample_next`).
    With ``use_cache`` the keys and values of earlier tokens are kept in a
    :class:`KVCache` and each step processes the one new token; when the
    sequence outgrows the context, the window slides, the positions change,
    and the cache is refilled from the window. Both ways give the same
    tokens (up to floating-point rounding); the cached one is much faster.
    The model is put in eval mode (no dropout) and restored afterwards.
    """
    expect_shape(ids, "B N", "ids")
    if ids.shape[1] < 1:
        raise ShapeError("ids: expected at least one token to continue, got N = 0")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens: expected an int ≥ 0, got {max_new_tokens!r}")
    block_size = model.config.block_size
    was_training = model.training
    model.eval()
    try:
        cache = model.new_cache(ids.shape[0]) if use_cache else None
        for _ in range(max_new_tokens):
            window = ids[:, -block_size:]  # (B, ≤ block_size): what the model reads
            if cache is None:
                logits = model(window)[:, -1]  # (B, V): the whole window again
            elif cache.length == 0 or cache.length + 1 > block_size:
                cache.reset()  # first step, or the window slid: refill it
                logits = model(window, cache=cache)[:, -1]
            else:
                logits = model(ids[:, -1:], cache=cache)[:, -1]  # the new token only
            next_ids = sample_next(logits, temperature, top_k, generator)  # (B,)
            next_ids = next_ids.to(ids.dtype)  # int32 prompts stay int32
            ids = torch.cat([ids, next_ids[:, None]], dim=1)  # (B, N + 1)
    finally:
        model.train(was_training)
    return ids


@torch.no_grad()
def sequence_cross_entropy(
    model: GPT, ids: torch.Tensor, stride: int | None = None, batch_size: int = 64
) -> float:
    """Chapter 6: the mean of −ln p(w_n | w_{<n}) over a whole text ids (T,), in nats.

    Every token after the first is predicted once, from the ``block_size``
    tokens before it at most: windows of ``block_size + 1`` tokens start
    every ``stride`` tokens (default: half the context), and each scores
    only the targets the previous window did not, so every target but those
    of the first window sees at least ``block_size − stride`` tokens of
    context. This is the number to set beside an n-gram model's
    :meth:`~transformer_course.ngram.NGramModel.cross_entropy` on the same
    ids; the mean over random windows (``tc.evaluate``) also counts targets
    near a window's start, which see little context.
    """
    expect_shape(ids, "T", "ids")
    context = model.config.block_size
    stride = context // 2 if stride is None else stride
    if not isinstance(stride, int) or not 1 <= stride <= context:
        raise ValueError(f"stride: expected an int in 1..{context}, got {stride!r}")
    T = ids.shape[0]
    if T < 2:
        raise ShapeError(f"ids: expected at least 2 tokens to score, got T = {T}")
    starts = list(range(0, max(T - 1 - context, 0) + 1, stride))
    if starts[-1] + context < T - 1:
        starts.append(T - 1 - context)  # the last window ends at the last target
    was_training = model.training
    model.eval()
    total, scored_up_to = 0.0, 0  # targets ids[1 .. scored_up_to] are done
    try:
        for first in range(0, len(starts), batch_size):
            group = starts[first : first + batch_size]
            length = min(context, T - 1)
            rows = torch.stack([ids[s : s + length + 1] for s in group])  # (b, L+1)
            logits = model(rows[:, :-1])  # (b, L, V)
            nll = F.cross_entropy(
                logits.transpose(1, 2), rows[:, 1:], reduction="none"
            )  # (b, L): −ln p of target s + 1 + j
            for row, start in zip(nll, group, strict=True):
                new = start + length - scored_up_to  # targets not scored before
                total += float(row[length - new :].double().sum())
                scored_up_to = start + length
    finally:
        model.train(was_training)
    return total / (T - 1)
