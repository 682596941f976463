"""Chapter 4, The transformer block: attention, MLP, residuals and normalisation.

A block refines (B, N, D) tokens in two stages (Turner §2): multi-head
self-attention mixes information across the tokens (chapter 3), then an MLP
refines the features of each token on its own, with the same weights for every
token (Turner §2.2). Each stage is a residual branch, ``x + branch(x)``, so a
block whose branches output zero passes its input through unchanged
(Turner §2.3). Where the normalisation goes gives two blocks:

* pre-norm, the default (Xiong et al. 2020; Turner fig. 7; GPT-2 and later),
  normalises the input of each branch and leaves the residual path clean::

      x = x + attn(norm_1(x))
      x = x + mlp(norm_2(x))

* post-norm, the original transformer's "Add & Normalize" (Vaswani et al. 2017),
  normalises after each addition::

      x = norm_1(x + attn(x))
      x = norm_2(x + mlp(x))

Blocks are stacked M times, each applied to the output of the one before. The
block converts to and from ``torch.nn.TransformerEncoderLayer`` (batch_first,
norm_first either way; :mod:`~transformer_course.torch_layers`), and tests prove
the two agree, outputs and gradients.

Chapter 5 adds rotary positions as a choice of the config: with
``BlockConfig(..., rotary=True)`` the block's attention turns each head's
queries and keys by their position
(:class:`~transformer_course.positions.RotaryEmbedding`), and ``forward`` takes
the position of the first token as ``offset``. ALiBi needs no option: its bias
(:func:`~transformer_course.positions.alibi_bias`) is a float ``mask``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
from torch import nn

from . import multihead
from .multihead import MultiHeadAttention, _expect_heads
from .norms import LayerNorm, RMSNorm
from .positions import RotaryEmbedding
from .shapes import (
    expect_bool,
    expect_choice,
    expect_number,
    expect_positive_int,
    expect_probability,
    expect_shape,
)

if TYPE_CHECKING:  # chapter 6's cache; only the types are needed here
    from .kv_cache import KVCache, LayerCache

__all__ = [
    "MLP",
    "Block",
    "BlockConfig",
    "BlockStack",
    "flop_count",
    "parameter_count",
]

ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU}
NORMS = ("layer", "none", "rms")  # LayerNorm, no norm (chapter 4), RMSNorm


@dataclass
class BlockConfig:
    """Chapter 4: everything that defines a :class:`Block`, in one place."""

    d_model: int  # D, the width of every token
    n_heads: int  # H; each head has width d = D / H
    d_mlp: int | None = None  # the MLP's hidden width; None: 4·D (Vaswani et al.)
    dropout: float = 0.0  # on attention weights and both branches, in training
    bias: bool = True  # biases in the linear layers, and β in LayerNorm
    norm: Literal["layer", "rms", "none"] = "layer"  # "none": chapter 4's experiment
    norm_first: bool = True  # pre-norm (Xiong et al.); False: post-norm
    activation: Literal["gelu", "relu"] = "gelu"  # the MLP's non-linearity
    eps: float = 1e-5  # ε of the normalisations
    residual: bool = True  # False: no skip connections (chapter 4's experiment)
    rotary: bool = False  # rotary positions on q and k (chapter 5)
    max_len: int | None = None  # with rotary: the largest offset + N; None: any
    rotary_base: float = 10000.0  # with rotary: ω_i = base^(−2i/d)

    def __post_init__(self):
        _expect_heads(self.d_model, self.n_heads)
        if self.d_mlp is None:
            self.d_mlp = 4 * self.d_model
        expect_positive_int(self.d_mlp, "d_mlp")
        expect_probability(self.dropout, "dropout")
        expect_choice(self.norm, "norm", NORMS)
        expect_choice(self.activation, "activation", ACTIVATIONS)
        expect_number(self.eps, "eps", above=0)
        expect_bool(self.residual, "residual")
        expect_bool(self.rotary, "rotary")
        d = self.d_model // self.n_heads
        if self.rotary and d % 2:
            raise ValueError(
                "rotary: expected an even head width d = d_model / n_heads (features "
                f"are rotated in pairs), got d = {self.d_model} / {self.n_heads} = {d}"
            )
        if self.rotary:  # checks max_len and base
            RotaryEmbedding(d, self.max_len, self.rotary_base)


def _make_norm(config: BlockConfig) -> nn.Module:
    """One of the block's normalisations, as ``config.norm`` says."""
    if config.norm == "none":
        return nn.Identity()
    if config.norm == "rms":
        return RMSNorm(config.d_model, eps=config.eps)
    return LayerNorm(config.d_model, eps=config.eps, bias=config.bias)


class MLP(nn.Module):
    """Chapter 4: Linear, activation, Linear, applied to every token with the same weights.

    ``forward`` maps (..., N, D) to (..., N, D): token n's output depends on
    token n's features only (Turner §2.2: x_n = MLP_θ(y_n)). The hidden layer
    is wider, d_mlp = 4·D by default, and costs 2·D·d_mlp weights.

    Args:
        d_model: D.
        d_mlp: hidden width; None means 4·D.
        activation: ``"gelu"`` (exact, as ``nn.GELU()``) or ``"relu"`` (the
            original transformer's, as in the handwritten notes).
        bias: biases in both linear layers.
        dropout: on the output, in training.
    """

    def __init__(
        self,
        d_model: int,
        d_mlp: int | None = None,
        activation: str = "gelu",
        bias: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        d_mlp = 4 * d_model if d_mlp is None else d_mlp
        expect_choice(activation, "activation", ACTIVATIONS)
        self.d_model = d_model
        self.up_proj = nn.Linear(d_model, d_mlp, bias=bias)  # W_1: D -> d_mlp
        self.activation = ACTIVATIONS[activation]()
        self.down_proj = nn.Linear(d_mlp, d_model, bias=bias)  # W_2: d_mlp -> D
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        expect_shape(x, "... D", "x", D=self.d_model)
        hidden = self.activation(self.up_proj(x))  # (..., N, d_mlp)
        return self.dropout(self.down_proj(hidden))  # (..., N, D)


class Block(nn.Module):
    """Chapter 4: the transformer block, pre-norm or post-norm (see the module).

    Args:
        config: a :class:`BlockConfig`.

    Submodules: ``norm_1``, ``attn`` (chapter 3's
    :class:`~transformer_course.multihead.MultiHeadAttention`, with
    ``attn.rotary`` a :class:`~transformer_course.positions.RotaryEmbedding`
    when ``config.rotary``), ``norm_2``, ``mlp`` (:class:`MLP`), and
    ``resid_dropout`` on the attention branch.
    """

    def __init__(self, config: BlockConfig):
        super().__init__()
        c = self.config = config
        self.norm_1 = _make_norm(c)
        rotary = (
            RotaryEmbedding(c.d_model // c.n_heads, c.max_len, c.rotary_base)
            if c.rotary
            else None
        )
        self.attn = MultiHeadAttention(c.d_model, c.n_heads, c.bias, c.dropout, rotary)
        self.resid_dropout = nn.Dropout(c.dropout)
        self.norm_2 = _make_norm(c)
        self.mlp = MLP(c.d_model, c.d_mlp, c.activation, c.bias, c.dropout)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        offset: int = 0,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        """x (B, N, D) -> (B, N, D). ``mask`` and ``is_causal`` go to attention
        (:meth:`MultiHeadAttention.forward`: a boolean mask is True where a query
        may attend to a key); ``offset`` is the position of the first token
        (rotary, chapter 5); ``cache`` holds earlier keys and values (chapter 6).
        """
        expect_shape(x, "B N D", "x", D=self.config.d_model)
        skip = 1.0 if self.config.residual else 0.0  # 0: chapter 4's experiment

        def attend(h):  # the attention branch: (B, N, D) -> (B, N, D)
            out = self.attn(h, mask, is_causal, offset=offset, cache=cache)
            return self.resid_dropout(out)

        if self.config.norm_first:  # pre-norm: Turner fig. 7, Xiong et al.
            x = skip * x + attend(self.norm_1(x))
            x = skip * x + self.mlp(self.norm_2(x))
        else:  # post-norm: "Add & Normalize" after each branch
            x = self.norm_1(skip * x + attend(x))
            x = self.norm_2(skip * x + self.mlp(x))
        return x

    def attention_weights(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        offset: int = 0,
    ) -> torch.Tensor:
        """The weights this block's attention gives x (B, N, D): (B, H, N, N).

        To see every block's weights, call this on each block's input in a stack.
        """
        expect_shape(x, "B N D", "x", D=self.config.d_model)
        h = self.norm_1(x) if self.config.norm_first else x
        return self.attn(h, mask, is_causal, need_weights=True, offset=offset)[1]


class BlockStack(nn.Module):
    """Chapter 4: M blocks applied in turn, then a final norm after a pre-norm stack.

    In a pre-norm stack (Turner fig. 7) the residual stream itself is never
    normalised, so ``final_norm`` normalises the last block's output before a
    head reads it (GPT-2 and later; chapters 6 and 7). In a post-norm stack the
    last block already ends with a norm and ``final_norm`` is the identity.

    Args:
        config: the :class:`BlockConfig` of every block.
        n_blocks: M.
    """

    def __init__(self, config: BlockConfig, n_blocks: int):
        super().__init__()
        expect_positive_int(n_blocks, "n_blocks")
        self.config = config
        self.blocks = nn.ModuleList(Block(config) for _ in range(n_blocks))
        self.final_norm = _make_norm(config) if config.norm_first else nn.Identity()

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        offset: int = 0,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """x (B, N, D) -> (B, N, D): every block, then ``final_norm``. ``mask``,
        ``is_causal`` and ``offset`` as in :meth:`Block.forward`; with a ``cache``
        (chapter 6), block m uses ``cache.layers[m]``."""
        if cache is not None and len(cache.layers) != len(self.blocks):
            raise ValueError(
                f"cache: expected one layer per block, {len(self.blocks)}, "
                f"got {len(cache.layers)}"
            )
        for m, block in enumerate(self.blocks):
            layer_cache = None if cache is None else cache.layers[m]
            x = block(x, mask, is_causal, offset, layer_cache)  # (B, N, D)
        return self.final_norm(x)

    def residual_stream(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        offset: int = 0,
    ) -> list[torch.Tensor]:
        """The stream x^(0) … x^(M): the input and each block's output, M + 1
        tensors (B, N, D), before ``final_norm``."""
        stream = [x]
        for block in self.blocks:
            stream.append(block(stream[-1], mask, is_causal, offset))  # (B, N, D)
        return stream


def parameter_count(config: BlockConfig) -> dict[str, int]:
    """Chapter 4: parameters of one :class:`Block`, by part, and their total.

    Attention 4D² + 4D (chapter 3), MLP 2·D·d_mlp + d_mlp + D, and D per γ and
    per β of each norm: with d_mlp = 4D and LayerNorm, 12D² + 13D in all.
    Biases and β are left out when ``config.bias`` is False.
    """
    D, hidden = config.d_model, config.d_mlp
    attention = multihead.parameter_count(D, config.n_heads, config.bias)
    mlp = 2 * D * hidden + ((hidden + D) if config.bias else 0)
    per_norm = {"none": 0, "rms": D, "layer": 2 * D if config.bias else D}
    norms = 2 * per_norm[config.norm]
    return {
        "attention": attention,
        "mlp": mlp,
        "norms": norms,
        "total": attention + mlp + norms,
    }


def flop_count(config: BlockConfig, n_tokens: int) -> dict[str, int]:
    """Chapter 4, eq. (4.2): forward FLOPs of one block on one sequence of N tokens.

    Two FLOPs per multiply-add; norms, activations, biases and softmax are
    ignored. Attention 8·N·D² + 4·N²·D (chapter 3); the MLP's two products
    2·N·D·d_mlp each, 16·N·D² with d_mlp = 4D. They are equal at N = 2D.
    """
    attention = multihead.flop_count(config.d_model, config.n_heads, n_tokens)
    mlp = 4 * n_tokens * config.d_model * config.d_mlp
    return {"attention": attention, "mlp": mlp}
