"""Chapter 3, Multi-head self-attention.

H heads, each with its own queries, keys and values of width d = D/H, run side
by side; their outputs are concatenated and mixed by an output projection
(lecture notes §9.4.2: Concat(Z¹…Z^H) W_O; Bishop: Y = [H_1, H_2, …] W_o).
Turner (eqs. 4-6) writes the same layer as a sum over heads,
``Y = Σ_h V_h X A_h``, where his ``V_h = U_h U_{v,h}`` is a D×D map of rank ≤ d
(footnote 13). The course writes that map W_OV^h (Turner's V_h), keeping V for the
values: see :func:`sum_over_heads` and :func:`head_value_maps`. Apart from the
W_OV^h, the layer mixes across tokens, not across features: see
:func:`feature_mixing`.

The module holds one fused QKV projection, reshaped to (B, H, N, d). Its fast
path calls PyTorch's fused ``scaled_dot_product_attention``; with
``need_weights=True`` it takes the teaching path of chapter 2
(:func:`transformer_course.attention.scaled_dot_product_attention`), which also
returns the per-head weights. Both paths take their mask from
:func:`transformer_course.attention.attention_mask`, so they accept, combine and
reject masks alike. Weights convert to and from ``torch.nn.MultiheadAttention``
(:mod:`~transformer_course.torch_layers`).

Chapter 5 adds one option: ``rotary``, a
:class:`~transformer_course.positions.RotaryEmbedding` that turns each head's
queries and keys by their positions right after the head split, before the
scores, so both paths see the same rotated q and k.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from .attention import (
    _expect_tokens,
    attention_mask,
    attention_weights,
    scaled_dot_product_attention,
)
from .shapes import (
    expect_int,
    expect_positive_int,
    expect_probability,
    expect_shape,
)

if TYPE_CHECKING:  # chapters 5 and 6; only the types are needed here
    from .kv_cache import LayerCache
    from .positions import RotaryEmbedding

__all__ = [
    "MultiHeadAttention",
    "feature_mixing",
    "flop_count",
    "head_value_maps",
    "merge_heads",
    "minimal_forward",
    "parameter_count",
    "split_heads",
    "sum_over_heads",
]


def _expect_heads(d_model: int, n_heads: int) -> None:
    """A ValueError unless D and H are positive ints with D divisible by H."""
    expect_positive_int(d_model, "d_model")
    expect_positive_int(n_heads, "n_heads")
    if d_model % n_heads:
        raise ValueError(
            f"d_model must be divisible by n_heads: got d_model={d_model}, "
            f"n_heads={n_heads} (d_model % n_heads = {d_model % n_heads})"
        )


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, N, H·d) -> (B, H, N, d): head h gets features h·d ... (h+1)·d - 1."""
    dims = expect_shape(x, "B N D", "x")
    expect_positive_int(n_heads, "n_heads")
    if dims["D"] % n_heads:
        raise ValueError(
            f"x: width {dims['D']} is not divisible by n_heads = {n_heads}"
        )
    B, N, D = dims["B"], dims["N"], dims["D"]
    return x.view(B, N, n_heads, D // n_heads).transpose(1, 2)  # (B, H, N, d)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, N, d) -> (B, N, H·d): the concatenation of the heads' outputs."""
    dims = expect_shape(x, "B H N d", "x")
    return x.transpose(1, 2).reshape(
        dims["B"], dims["N"], dims["H"] * dims["d"]
    )  # (B, N, D)


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention over (B, N, D) tokens.

    Args:
        d_model: D, the token width; must be divisible by ``n_heads``.
        n_heads: H; each head has width d = D / H, which keeps the parameter
            count 4D² (+4D biases) whatever H is (Turner, footnote 13).
        bias: biases in the projections.
        dropout: dropout on the attention weights while training.
        rotary: chapter 5's rotary positions for the queries and keys, a
            :class:`~transformer_course.positions.RotaryEmbedding` of width d;
            None (the default) adds no positions.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        bias: bool = True,
        dropout: float = 0.0,
        rotary: RotaryEmbedding | None = None,
    ):
        super().__init__()
        _expect_heads(d_model, n_heads)
        expect_probability(dropout, "dropout")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)  # W_q, W_k, W_v
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W_O
        if rotary is not None and getattr(rotary, "head_dim", None) != self.d_head:
            raise ValueError(
                f"rotary: expected a rotary embedding of head_dim d = d_model / "
                f"n_heads = {self.d_head}, got head_dim="
                f"{getattr(rotary, 'head_dim', None)!r}"
            )
        self.rotary = rotary  # turns q and k by position (chapter 5), or None

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        offset: int = 0,
        cache: LayerCache | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """x (B, N, D) -> (B, N, D); with ``need_weights`` also (B, H, N, N).

        ``mask``: boolean (True where a query may attend to a key) or additive,
        broadcastable to (B, H, N, N), e.g. (B, 1, 1, N) for padding; it combines
        with ``is_causal`` (:func:`~transformer_course.attention.attention_mask`).
        A query allowed no key outputs zeros. ``offset``: the position of the
        first token, for rotary positions (chapter 5). ``cache``: chapter 6's
        :class:`~transformer_course.kv_cache.LayerCache` of the L tokens before
        x; the N queries attend to all L + N keys (masks are (..., N, L + N),
        ``is_causal`` aligns bottom-right) and positions continue at L.
        """
        offset = self._checked_offset(x, offset, cache)
        q, k, v = self.project(x)  # 3 × (B, H, N, d)
        if self.rotary is not None:  # chapter 5: turn q and k by position, not v
            q, k = self.rotary(q, k, offset)  # 2 × (B, H, N, d)
        if cache is not None:  # chapter 6: the tokens before x, and x appended
            k, v = cache.append(k, v)  # 2 × (B, H, L + N, d)
        heads, weights = self.attend(q, k, v, mask, is_causal, need_weights)
        out = self.out_proj(merge_heads(heads))  # (B, N, D)
        return (out, weights) if need_weights else out

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x (B, N, D) -> q, k, v, each (B, H, N, d): one product for all heads."""
        q, k, v = self.qkv_proj(x).chunk(3, dim=-1)  # 3 × (B, N, D)
        return tuple(split_heads(t, self.n_heads) for t in (q, k, v))

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """q (B, H, N_q, d), k and v (B, H, N_k, d) -> (B, H, N_q, d), and the
        weights (B, H, N_q, N_k) with ``need_weights`` (chapter 2's teaching
        path); otherwise PyTorch's fused kernel on the same mask."""
        dropout = self.dropout if self.training else 0.0
        if need_weights:  # teaching path: explicit softmax, returns the weights
            heads, weights = scaled_dot_product_attention(
                q, k, v, mask=mask, is_causal=is_causal, return_weights=True
            )  # (B, H, N_q, d), (B, H, N_q, N_k)
            if dropout > 0:
                weights = F.dropout(weights, dropout)
                heads = weights @ v
            return heads, weights
        # torch's is_causal aligns top-left: right only for N_q = N_k and no mask
        torch_causal = is_causal and mask is None and q.shape[-2] == k.shape[-2]
        if not torch_causal:
            scores_shape = (*q.shape[:-1], k.shape[-2])  # (B, H, N_q, N_k)
            mask = attention_mask(scores_shape, mask, is_causal, q.dtype, q.device)
        heads = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=torch_causal, dropout_p=dropout
        )  # (B, H, N_q, d)
        return heads, None

    def _checked_offset(
        self, x: torch.Tensor, offset: int, cache: LayerCache | None
    ) -> int:
        """Check x and ``offset``; the position of x's first token."""
        expect_shape(x, "B N D", "x", D=self.d_model)
        _expect_tokens(x, "x", "token")
        expect_int(offset, "offset", least=0)
        if cache is not None and offset:
            raise ValueError(
                f"offset: with a cache, positions continue from the "
                f"{cache.length} tokens it holds; expected offset=0, got {offset}"
            )
        return offset if cache is None else cache.length


def minimal_forward(
    layer: MultiHeadAttention, x: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Chapter 3, §3.3: the idea of :class:`MultiHeadAttention` alone.

    x (B, N, D) -> (B, N, D) with ``layer``'s weights; ``mask`` (boolean, True
    where a query may see a key) broadcasts to (B, H, N, N). The same numbers
    as ``layer(x, mask=mask)``, which adds checks and the options of later
    chapters (a query allowed no key gets NaN here, zeros there).
    """
    B, N, D = x.shape
    H, d = layer.n_heads, layer.d_head  # d = D / H
    q, k, v = layer.qkv_proj(x).chunk(3, dim=-1)  # 3 × (B, N, D): all heads at once
    q, k, v = (
        t.view(B, N, H, d).transpose(1, 2) for t in (q, k, v)
    )  # 3 × (B, H, N, d): the heads become a batch dimension
    scores = q @ k.transpose(-2, -1) / d**0.5  # (B, H, N, N), eq. (2.1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # eq. (2.2)
    weights = torch.softmax(scores, dim=-1)  # (B, H, N, N): rows sum to 1
    heads = weights @ v  # (B, H, N, d): one weighted average per head
    concatenated = heads.transpose(1, 2).reshape(B, N, D)  # (B, N, H·d)
    return layer.out_proj(concatenated)  # (B, N, D): W_O mixes the heads


def head_value_maps(module: MultiHeadAttention) -> torch.Tensor:
    """W_OV^h = U_h U_{v,h} (Turner's V_h) for every head: (H, D, D), each of rank ≤ d.

    In the row convention head h contributes ``A_h x (W_OV^h)ᵀ`` (bias aside), where
    ``W_OV^h``, the head's OV matrix, chains its value projection (d rows of W_v) with its d columns of W_O.
    """
    D, d = module.d_model, module.d_head
    W_v = module.qkv_proj.weight[2 * D :]  # (D, D): rows are value features
    W_o = module.out_proj.weight  # (D, D)
    maps = [
        W_o[:, h * d : (h + 1) * d] @ W_v[h * d : (h + 1) * d]
        for h in range(module.n_heads)
    ]
    return torch.stack(maps)  # (H, D, D)


def sum_over_heads(
    module: MultiHeadAttention, x: torch.Tensor, mask=None, is_causal=False
):
    """The same layer as Turner's sum over heads (eq. 4), in rows:
    ``Y = Σ_h A_h X (W_OV^h)ᵀ`` (+ biases).

    W_OV^h is Turner's V_h (:func:`head_value_maps`).

    Equal to ``module(x)``; written to show that concatenating then projecting
    is adding one projected output per head.
    """
    expect_shape(x, "B N D", "x", D=module.d_model)
    D = module.d_model
    weight, bias = module.qkv_proj.weight, module.qkv_proj.bias
    q, k = (x @ weight[i * D : (i + 1) * D].T for i in (0, 1))  # (B, N, D) each
    if bias is not None:
        q, k = q + bias[:D], k + bias[D : 2 * D]
    q, k = split_heads(q, module.n_heads), split_heads(k, module.n_heads)
    if module.rotary is not None:  # chapter 5: positions turn q and k, not values
        q, k = module.rotary(q, k)  # 2 × (B, H, N, d)
    weights = attention_weights(
        q, k, mask=mask, is_causal=is_causal
    )  # (B, H, N, N): A_h for every head
    maps = head_value_maps(module)  # (H, D, D)
    y = sum(
        weights[:, h] @ x @ maps[h].T for h in range(module.n_heads)
    )  # Σ_h A_h X (W_OV^h)ᵀ: (B, N, D)
    if bias is not None:  # the value bias goes through each head's average, then W_O
        y = y + bias[2 * D :] @ module.out_proj.weight.T
    if module.out_proj.bias is not None:
        y = y + module.out_proj.bias
    return y


def feature_mixing(
    module: MultiHeadAttention, x: torch.Tensor, mask=None, is_causal=False
) -> torch.Tensor:
    """How the features of input token m reach those of output token n: (B, N, N, D, D).

    With the attention weights held fixed, the layer is linear in x, and its
    Jacobian for the pair (n, m) is ``∂y_n/∂x_m = Σ_h A_h[n, m] W_OV^h`` (the
    course's W_OV^h, Turner's V_h: :func:`head_value_maps`). Every pair of
    positions mixes features through a combination of the same H maps of rank
    ≤ d; only the H coefficients A_h[n, m] depend on the data. That is how
    little feature mixing multi-head attention does, next to the MLP
    (Turner §2.1-2.2; chapter 3). The weights' own dependence on x adds the
    rest of the full Jacobian.

    Args:
        module: the layer.
        x: (B, N, D) tokens.
        mask, is_causal: as in :meth:`MultiHeadAttention.forward`.

    Returns:
        (B, N, N, D, D): entry [b, n, m, i, j] = ∂y[b, n, i]/∂x[b, m, j] with
        the weights fixed.
    """
    expect_shape(x, "B N D", "x", D=module.d_model)
    _, weights = module(x, mask=mask, is_causal=is_causal, need_weights=True)
    maps = head_value_maps(module)  # (H, D, D)
    return torch.einsum("bhnm,hij->bnmij", weights, maps)  # Σ_h A_h[n, m] W_OV^h


def parameter_count(d_model: int, n_heads: int, bias: bool = True) -> int:
    """Parameters of :class:`MultiHeadAttention`: 4D² + 4D, independent of H."""
    _expect_heads(d_model, n_heads)
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


def flop_count(d_model: int, n_heads: int, n_tokens: int) -> int:
    """Forward FLOPs (2 per multiply-add) for one sequence of N tokens.

    Projections (QKV and output, 4D² weights): 8·N·D². Scores q kᵀ and the
    weighted sum of values, per head 2·(2·N²·d), over H heads with d = D/H:
    4·N²·D. Turner's footnote 12 counts O(H·D·N²) for his sum-over-heads form,
    where each head averages full-width features (W_OV^h X A_h, Turner's V_h);
    factoring W_OV^h = U_h U_{v,h} with d = D/H brings that down to O(D·N²). Softmax and
    biases are ignored.
    """
    _expect_heads(d_model, n_heads)
    expect_int(n_tokens, "n_tokens", least=0)
    return 8 * n_tokens * d_model * d_model + 4 * n_tokens * n_tokens * d_model
