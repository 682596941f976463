"""Chapter 2, Attention: weighted averages whose weights the data chooses.

Row convention (see the Notation page): queries ``q`` (..., N_q, d), keys ``k``
(..., N_k, d), values ``v`` (..., N_k, d_v). The attention weights

    A = softmax(q kᵀ · scale + mask)        (..., N_q, N_k), each row sums to 1

average the values: ``out = A v`` (lecture notes §9.3; Bishop: X̃ = Softmax(QKᵀ/√D)V;
Turner eq. 2 in columns). ``scale`` defaults to 1/√d.

Masks follow ``torch.nn.functional.scaled_dot_product_attention``: a boolean
mask is True where a query may attend to a key; a float mask is added to the
scores (use ``-inf`` to forbid). ``is_causal=True`` lets query n see keys 0..n.

The teaching implementations here are explicit (matmul, softmax, mask); tests
prove they equal PyTorch's fused kernel in float64, outputs and gradients.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .shapes import ShapeError, expect_shape

__all__ = [
    "AdditiveAttention",
    "SelfAttention",
    "additive_scores",
    "attention_weights",
    "causal_mask",
    "scaled_dot_product_attention",
    "softmax",
]


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax: ``exp(x - max) / sum(exp(x - max))`` along ``dim``.

    Subtracting the maximum changes nothing mathematically (it cancels between
    numerator and denominator) but keeps ``exp`` from overflowing: ``exp(1000)``
    is ``inf`` in float32 and float64, ``exp(1000 - 1000)`` is 1. A row that is
    entirely ``-inf`` gives NaN, as ``torch.softmax`` does.
    """
    shifted = (
        x - x.amax(dim=dim, keepdim=True).detach()
    )  # the shift's gradient cancels anyway
    exps = shifted.exp()
    return exps / exps.sum(dim=dim, keepdim=True)


def causal_mask(n_queries: int, n_keys: int | None = None, device=None) -> torch.Tensor:
    """Boolean (N_q, N_k) mask, True on and below the diagonal: query n sees keys 0..n."""
    n_keys = n_queries if n_keys is None else n_keys
    return torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril()


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A mask as something to add to the scores."""
    if mask.dtype == torch.bool:
        return torch.zeros((), dtype=dtype, device=mask.device).masked_fill(
            ~mask, float("-inf")
        )
    return mask.to(dtype)


def attention_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = False,
) -> torch.Tensor:
    """``softmax(q kᵀ · scale + mask)``: how much each query takes from each key.

    Args:
        q: (..., N_q, d) queries.
        k: (..., N_k, d) keys.
        mask: boolean (True = may attend) or additive, broadcastable to
            (..., N_q, N_k).
        scale: multiplies the scores; default 1/√d.
        is_causal: apply :func:`causal_mask` (not together with ``mask``).

    Returns:
        (..., N_q, N_k) weights; each row sums to 1.
    """
    dims = expect_shape(q, "... N d", "q")
    dims = expect_shape(k, "... M d", "k", known={"d": dims["d"]})
    n_q, n_k = q.shape[-2], k.shape[-2]
    if is_causal and mask is not None:
        raise ValueError("pass either mask or is_causal=True, not both")
    scale = 1.0 / math.sqrt(dims["d"]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., N_q, N_k)
    if is_causal:
        mask = causal_mask(n_q, n_k, device=q.device)
    if mask is not None:
        try:
            torch.broadcast_shapes(mask.shape, scores.shape)
        except RuntimeError:
            raise ShapeError(
                f"mask: expected a shape broadcastable to the scores (..., N_q, N_k) = "
                f"{tuple(scores.shape)}, got {tuple(mask.shape)}"
            ) from None
        scores = scores + _additive(mask, scores.dtype)
    return softmax(scores, dim=-1)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    is_causal: bool = False,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q kᵀ/√d + mask) v``, written out (the teaching path).

    Args:
        q: (..., N_q, d); k: (..., N_k, d); v: (..., N_k, d_v).
        mask, scale, is_causal: as in :func:`attention_weights`.
        return_weights: also return the (..., N_q, N_k) weights.

    Returns:
        (..., N_q, d_v), and the weights if asked for. Equal to
        ``torch.nn.functional.scaled_dot_product_attention`` with the same
        arguments (``attn_mask=mask``).
    """
    dims = expect_shape(k, "... M d", "k")
    expect_shape(v, "... M e", "v", M=dims["M"])
    weights = attention_weights(q, k, mask=mask, scale=scale, is_causal=is_causal)
    out = weights @ v  # (..., N_q, N_k) @ (..., N_k, d_v) -> (..., N_q, d_v)
    return (out, weights) if return_weights else out


def additive_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    w: torch.Tensor,
) -> torch.Tensor:
    """Additive (Bahdanau) scores ``s[n, m] = wᵀ tanh(W_q q_n + W_k k_m)``.

    Args:
        q: (..., N_q, d_q); k: (..., N_k, d_k).
        W_q: (h, d_q); W_k: (h, d_k); w: (h,).

    Returns:
        (..., N_q, N_k) scores. Costs O(N_q · N_k · h) in time and memory, against
        O(N_q · N_k · d) time and O(N_q · N_k) memory for dot-product scores.
    """
    expect_shape(w, "h", "w")
    expect_shape(W_q, "h d", "W_q", h=w.shape[0])
    expect_shape(W_k, "h e", "W_k", h=w.shape[0])
    expect_shape(q, "... N d", "q", d=W_q.shape[1])
    expect_shape(k, "... M e", "k", e=W_k.shape[1])
    q_proj = q @ W_q.T  # (..., N_q, h)
    k_proj = k @ W_k.T  # (..., N_k, h)
    hidden = torch.tanh(
        q_proj.unsqueeze(-2) + k_proj.unsqueeze(-3)
    )  # (..., N_q, N_k, h)
    return hidden @ w  # (..., N_q, N_k)


class AdditiveAttention(nn.Module):
    """Additive attention: scores from a one-hidden-layer network, then softmax and average.

    ``forward(q, k, v, mask=None)`` returns ``(out, weights)`` with out
    (..., N_q, d_v) and weights (..., N_q, N_k).
    """

    def __init__(self, d_query: int, d_key: int, d_hidden: int):
        super().__init__()
        self.query_proj = nn.Linear(d_query, d_hidden, bias=False)  # W_q
        self.key_proj = nn.Linear(d_key, d_hidden, bias=False)  # W_k
        self.score = nn.Linear(d_hidden, 1, bias=False)  # w

    def forward(self, q, k, v, mask=None):
        scores = additive_scores(
            q, k, self.query_proj.weight, self.key_proj.weight, self.score.weight[0]
        )
        if mask is not None:
            scores = scores + _additive(mask, scores.dtype)
        weights = softmax(scores, dim=-1)  # (..., N_q, N_k)
        return weights @ v, weights


class SelfAttention(nn.Module):
    """Single-head self-attention: queries, keys and values all come from x.

    ``q = x W_q``, ``k = x W_k``, ``v = x W_v`` (Turner: U_q, U_k as separate maps,
    eq. 3), then ``softmax(q kᵀ/√d_k) v``.

    Args:
        d_model: D, the width of the input tokens.
        d_k: width of queries and keys.
        d_v: width of values (and of the output).
        bias: add biases to the three projections.
    """

    def __init__(self, d_model: int, d_k: int, d_v: int, bias: bool = False):
        super().__init__()
        self.d_model = d_model
        self.query_proj = nn.Linear(d_model, d_k, bias=bias)
        self.key_proj = nn.Linear(d_model, d_k, bias=bias)
        self.value_proj = nn.Linear(d_model, d_v, bias=bias)

    def forward(self, x, mask=None, is_causal=False, need_weights=False):
        """x (..., N, D) -> (..., N, d_v); with ``need_weights`` also (..., N, N)."""
        expect_shape(x, "... N D", "x", D=self.d_model)
        q, k, v = (
            self.query_proj(x),
            self.key_proj(x),
            self.value_proj(x),
        )  # (..., N, d_k|d_v)
        out, weights = scaled_dot_product_attention(
            q, k, v, mask=mask, is_causal=is_causal, return_weights=True
        )
        return (out, weights) if need_weights else out
